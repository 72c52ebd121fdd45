package check

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// initializeID is the id of the checker's initialize (cancelled later, on
// purpose, once answered: see checkStrayCancels).
const initializeID = "check-initialize"

// session is one connection to the server, initialized.
type session struct {
	c      *client
	o      Options
	server Server
	seq    int // numbers the barrier pings
}

// initParams are the checker's initialize params, in revision.
func initParams(revision framing.Revision) map[string]any {
	return map[string]any{"protocolVersion": revision, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "mcp-cancel-proxy check", "version": "1"}}
}

// open initializes a session over b; on an error it has stopped reading
// and stopped b.
func open(b Lines, o Options) (*session, error) {
	s := &session{c: newClient(b.In, b.Out, o.MaxFrame), o: o}
	if err := s.initialize(); err != nil {
		s.c.stop(b.Stop)
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return s, nil
}

func (s *session) initialize() error {
	m, err := s.c.call(initializeID, framing.MethodInitialize, initParams("2025-11-25"), s.o.Timeout, nil)
	if err != nil {
		return err
	}
	if m.Error != nil {
		return fmt.Errorf("the server answered %s", m.describe())
	}
	var r struct {
		Protocol     framing.Revision `json:"protocolVersion"`
		Capabilities struct {
			Tasks struct {
				Requests struct {
					Tools struct {
						Call *struct{} `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
		Info struct{ Name, Version string } `json:"serverInfo"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		return fmt.Errorf("a result that is not an InitializeResult: %w", err)
	}
	s.server = Server{Name: r.Info.Name, Version: r.Info.Version, Protocol: r.Protocol, Tasks: r.Capabilities.Tasks.Requests.Tools.Call != nil}
	return s.c.send(notification(framing.MethodInitialized, map[string]any{}))
}

// tools pages through tools/list.
func (s *session) tools() ([]Tool, error) {
	var out []Tool
	cursor := ""
	for page := 0; page < 100; page++ {
		var params any
		if cursor != "" {
			params = map[string]any{"cursor": cursor}
		}
		m, err := s.c.call(fmt.Sprintf("check-tools-%d", page), "tools/list", params, s.o.Timeout, nil)
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("tools/list: the server answered %s", m.describe())
		}
		var r struct {
			Tools []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				Execution   struct {
					TaskSupport string `json:"taskSupport"`
				} `json:"execution"`
			} `json:"tools"`
			Next string `json:"nextCursor"`
		}
		if err := json.Unmarshal(m.Result, &r); err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		for _, t := range r.Tools {
			out = append(out, Tool{Name: t.Name, Description: t.Description, TaskSupport: t.Execution.TaskSupport})
		}
		if cursor = r.Next; cursor == "" {
			return out, nil
		}
	}
	return out, nil
}

// barrier sends a ping and waits for its answer, handing what comes before
// it to seen: on a stream of lines the server's messages come in order, so
// what the server said before the answer has all arrived. It reports
// whether the server answered (errClosed if it has gone).
func (s *session) barrier(seen func(*msg)) (bool, error) {
	s.seq++
	id := fmt.Sprintf("check-barrier-%d", s.seq)
	if err := s.c.send(request(id, "ping", nil)); err != nil {
		return false, errClosed
	}
	_, ok, err := s.c.until(s.o.Timeout, seen, func(m *msg) bool { return m.answers(id) })
	return ok, err
}

// run is what one cancelled call did.
type run struct {
	answered   bool          // before the cancel
	answeredIn time.Duration // from the call
	early      msg           // that answer

	progressBefore int
	late           *msg          // the answer after the cancel
	lateAfter      time.Duration // from the cancel
	progressAfter  int
	lastProgress   time.Duration // from the cancel
	gone           bool          // the server closed the connection
	stuck          bool          // it stopped answering ping
}

// silence is the time from the cancel to the last message about the call.
func (r *run) silence() time.Duration { return max(r.lastProgress, r.lateAfter) }

// cancelRun calls the tool under id with a progress token and cancels it:
// CancelAfter later, or at once in the same write when race is set.
func (s *session) cancelRun(id string, race bool) run {
	var r run
	params := map[string]any{"name": s.o.Tool, "_meta": map[string]any{"progressToken": id}}
	if len(s.o.Args) > 0 {
		params["arguments"] = s.o.Args
	}
	call, start := request(id, "tools/call", params), time.Now()
	var cancelled time.Time
	gone := func() run { r.gone = true; return r }
	seen := func(m *msg) {
		if tok, ok := m.progressOf(); ok && tok == quote(id) {
			if cancelled.IsZero() {
				r.progressBefore++
			} else {
				r.progressAfter++
				r.lastProgress = m.at.Sub(cancelled)
			}
		}
		if !cancelled.IsZero() && m.answers(id) && r.late == nil {
			late := *m
			r.late, r.lateAfter = &late, m.at.Sub(cancelled)
		}
	}
	if race {
		cancelled = time.Now()
		if s.c.send(call, cancel(id)) != nil {
			return gone()
		}
	} else {
		if s.c.send(call) != nil {
			return gone()
		}
		m, ok, err := s.c.until(s.o.CancelAfter, seen, func(m *msg) bool { return m.answers(id) })
		switch {
		case err != nil:
			return gone()
		case ok:
			r.answered, r.answeredIn, r.early = true, m.at.Sub(start), m
			return r
		}
		cancelled = time.Now()
		if s.c.send(cancel(id)) != nil {
			return gone()
		}
	}
	if _, _, err := s.c.until(s.o.Watch, seen, nil); err != nil {
		return gone()
	}
	ok, err := s.barrier(seen)
	r.gone, r.stuck = err != nil, err == nil && !ok
	return r
}
