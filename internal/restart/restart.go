// Package restart is the stdio wrapper's server side when a rule may
// restart the server (escalate: restart): a Link carries the session's
// frames to the current child, and replaces that child with a new one,
// replaying the client's initialize, while the client's session goes on.
package restart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Link is the session's server side in the stdio wrapper: the pipes
// of the current child, which an escalation (escalate: restart) replaces
// with a new child's while the client's session goes on. Reads give the
// current child's output, whole lines only; writes go to its stdin.
type Link struct {
	argv  []string
	copts child.Options
	log   *zap.Logger
	max   int // restarts allowed in any restartPeriod
	// Session is the session the link serves, set before Restart can be
	// called (the session's Options.OnRestart is Restart).
	Session *stdio.Session
	// OnRestart, if set, is called after each restart (a metric).
	OnRestart func()
	// switchable is set when a rule may restart the server: then the
	// session reads and writes through the link; otherwise it has the
	// child's own pipes.
	switchable bool

	out *io.PipeReader // what the session reads
	pw  *io.PipeWriter

	mu       sync.Mutex // guards the fields below, and writes to pw
	cur      *child.Process
	gen      int  // which child's output goes to the session
	midLine  bool // the last write to pw ended inside a line
	init     []byte
	inited   []byte
	restarts []time.Time
}

// restartPeriod is the window max restarts are counted in.
const restartPeriod = 10 * time.Minute

// New links a session to the child p, started from argv with copts; at
// most max restarts are allowed in any restartPeriod. Without switchable,
// the session gets p's pipes themselves, as fast as can be, and Restart
// refuses.
func New(p *child.Process, argv []string, copts child.Options, max int, log *zap.Logger, switchable bool) *Link {
	l := &Link{argv: argv, copts: copts, log: log, max: max, cur: p, switchable: switchable}
	if switchable {
		l.out, l.pw = io.Pipe()
		go l.pump(p, 0)
	}
	return l
}

// Current returns the child now serving.
func (l *Link) Current() *child.Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Conn is the session's server Conn, read and written as o says (the
// frame limit, the wait for a server that does not read): the child's own
// pipes, or, when a rule may restart it, the link's.
func (l *Link) Conn(o upstream.PipeOptions) stdio.Conn {
	if !l.switchable {
		return stdio.PipeServer(l.cur.Stdout, l.cur.Stdin, o)
	}
	return stdio.PipeServer(l.out, linkWriter{l}, o)
}

// pump copies a child's output to the session, line by line, for as long
// as that child is the current one; the current child's end is the
// session's server end.
func (l *Link) pump(p *child.Process, gen int) {
	br := bufio.NewReaderSize(p.Stdout, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			l.mu.Lock()
			if gen == l.gen {
				l.pw.Write(chunk)
				l.midLine = chunk[len(chunk)-1] != '\n'
			}
			l.mu.Unlock()
		}
		if err != nil && err != bufio.ErrBufferFull {
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen == l.gen {
		l.pw.Close()
	}
}

// linkWriter writes to the current child's stdin, and records the client's
// initialize and notifications/initialized, for a restart to replay.
type linkWriter struct{ l *Link }

func (w linkWriter) Write(p []byte) (int, error) {
	l := w.l
	l.mu.Lock()
	if l.init == nil || l.inited == nil {
		l.record(p)
	}
	in := l.cur.Stdin
	l.mu.Unlock()
	return in.Write(p)
}

func (w linkWriter) Close() error { return w.l.Current().Stdin.Close() }

// record keeps the client's initialize and initialized frames; l.mu is held.
func (l *Link) record(p []byte) {
	var f framing.Frame
	for _, line := range bytes.Split(p, []byte("\n")) {
		if len(line) == 0 || f.Parse(line) != nil || f.Batch {
			continue
		}
		switch f.Msgs[0].Method {
		case framing.MethodInitialize:
			l.init = field(line, "params")
		case framing.MethodInitialized:
			l.inited = append([]byte(nil), line...)
		}
	}
}

// Restart replaces the child, for Session.Options.OnRestart: a new child
// gets the client's initialize (under an id of the proxy's, its answer
// kept from the client) and initialized; the client's requests in flight
// get an error; the old child's process group is stopped with the stop
// ladder. It reports false when it cannot: too many restarts lately, no
// initialize seen yet, or the new child does not start.
func (l *Link) Restart(reason string) bool {
	l.mu.Lock()
	now := time.Now()
	recent := l.restarts[:0]
	for _, t := range l.restarts {
		if now.Sub(t) < restartPeriod {
			recent = append(recent, t)
		}
	}
	l.restarts = recent
	init, inited := l.init, l.inited
	l.mu.Unlock()
	switch {
	case !l.switchable:
		l.log.Warn("escalation refused: no rule had escalate: restart when the proxy started (a reload cannot add it)", zap.String("reason", reason))
		return false
	case len(recent) >= l.max:
		l.log.Warn("escalation refused: too many restarts", zap.Int("restarts", len(recent)), zap.Duration("within", restartPeriod), zap.String("reason", reason))
		return false
	case init == nil:
		l.log.Warn("escalation refused: the client's initialize was not seen, so it could not be replayed", zap.String("reason", reason))
		return false
	}
	np, err := child.Start(l.argv, l.copts)
	if err != nil {
		l.log.Error("escalation failed: cannot start the server", zap.Error(err))
		return false
	}
	replay := append(l.Session.OwnRequest(framing.MethodInitialize, init, func(*framing.Message) {}), '\n')
	if inited != nil {
		replay = append(append(replay, inited...), '\n')
	}
	np.Stdin.Write(replay)
	l.mu.Lock()
	old := l.cur
	l.cur = np
	l.gen++
	gen := l.gen
	if l.midLine { // end the old child's cut line: the session drops it as malformed
		l.pw.Write([]byte("\n"))
		l.midLine = false
	}
	l.restarts = append(l.restarts, now)
	l.mu.Unlock()
	go l.pump(np, gen)
	l.log.Warn("server restarted: a cancelled request was not stopped", events.Mark(events.ServerRestarted), zap.String("reason", reason),
		zap.Int("old_pid", old.Pid()), zap.Int("new_pid", np.Pid()))
	l.Session.Restarted("the MCP server was restarted by the proxy: " + reason)
	go old.Stop()
	if l.OnRestart != nil {
		l.OnRestart()
	}
	return true
}

// field returns the raw JSON of a top-level key of a JSON object.
func field(doc []byte, key string) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil {
		return nil
	}
	return obj[key]
}
