package proxy

import (
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// silenceTracker is a tracker on a clock the test moves, whose events are
// kept.
type silenceTracker struct {
	*Tracker
	now    time.Time
	events []Event
}

func newSilenceTracker() *silenceTracker {
	st := &silenceTracker{now: time.Unix(1e9, 0)}
	st.Tracker = NewTracker(TrackerOptions{Now: func() time.Time { return st.now },
		OnEvent: func(e Event) { st.events = append(st.events, e) }})
	return st
}

// decide has the tracker decide one message from a peer, and returns the
// outcome and the action of the last event it made.
func (st *silenceTracker) decide(t *testing.T, from Peer, raw string) (Outcome, Action) {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(raw)); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	n := len(st.events)
	o := st.Decide(from, &f.Msgs[0])
	var a Action
	if len(st.events) > n {
		a = st.events[len(st.events)-1].Action
	}
	return o, a
}

// passes checks that raw, from a peer, is passed on.
func (st *silenceTracker) passes(t *testing.T, from Peer, raw string) {
	t.Helper()
	if o, a := st.decide(t, from, raw); o.Verdict != Forward || a != ActForwarded {
		t.Fatalf("%s: verdict %d, action %q; want it passed on", raw, o.Verdict, a)
	}
}

// silenced checks that raw, from a peer, is kept from the other and
// counted as silenced.
func (st *silenceTracker) silenced(t *testing.T, from Peer, raw string) {
	t.Helper()
	before := st.Stats().Silenced
	if o, a := st.decide(t, from, raw); o.Verdict == Forward || a != ActSilenced {
		t.Fatalf("%s: verdict %d, action %q; want it silenced", raw, o.Verdict, a)
	}
	if got := st.Stats().Silenced; got != before+1 {
		t.Fatalf("%s: Silenced counted %d, want %d", raw, got, before+1)
	}
}

// TestNothingFollowsAnAnswer: once a request is answered, neither a second
// answer nor progress under its token reaches its issuer, and progress
// under a token that no request carried does not either, in both
// directions; each is counted as silenced (on the code before, the
// progress went on, and the second answer was a warned drop).
func TestNothingFollowsAnAnswer(t *testing.T) {
	st := newSilenceTracker()
	st.passes(t, Client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p1"}}}`)
	st.passes(t, Server, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":1}}`)
	st.passes(t, Server, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	st.silenced(t, Server, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":2}}`)
	st.silenced(t, Server, `{"jsonrpc":"2.0","id":1,"result":{"again":true}}`)
	st.silenced(t, Server, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"nobody","progress":1}}`)

	// The server's request, and the client's progress for it.
	st.passes(t, Server, `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"_meta":{"progressToken":7}}}`)
	st.passes(t, Client, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}`)
	st.passes(t, Client, `{"jsonrpc":"2.0","id":"s1","result":{}}`)
	st.silenced(t, Client, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":2}}`)
	st.silenced(t, Client, `{"jsonrpc":"2.0","id":"s1","result":{}}`)

	// An answer to an id never sent is no second answer: dropped, as before.
	if o, a := st.decide(t, Server, `{"jsonrpc":"2.0","id":99,"result":{}}`); o.Verdict != Drop || a != ActDropped {
		t.Fatalf("answer to no request: verdict %d, action %q", o.Verdict, a)
	}
}

// TestATasksTokenLivesUntilTheTaskEnds: a task-augmented request answered
// with a CreateTaskResult keeps its progress token until a message says
// the task is terminal (tasks/get, tasks/result, tasks/cancel,
// notifications/tasks/status), or its ttl passes; from then on, a
// notification tied to the task (related-task _meta) is kept back too.
func TestATasksTokenLivesUntilTheTaskEnds(t *testing.T) {
	call := func(id int, tok string) string {
		return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/call","params":{"name":"x","task":{"ttl":60000},"_meta":{"progressToken":"` + tok + `"}}}`
	}
	created := func(id int, task string, ttl string) string {
		return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"result":{"task":{"taskId":"` + task + `","status":"working","ttl":` + ttl + `}}}`
	}
	progress := func(tok string) string {
		return `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"` + tok + `","progress":1}}`
	}
	tagged := func(task string) string {
		return `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"` + task + `"}}}}`
	}
	ends := map[string]func(st *silenceTracker){
		"tasks/get": func(st *silenceTracker) {
			st.passes(t, Client, `{"jsonrpc":"2.0","id":100,"method":"tasks/get","params":{"taskId":"T"}}`)
			st.passes(t, Server, `{"jsonrpc":"2.0","id":100,"result":{"taskId":"T","status":"working"}}`)
			st.passes(t, Server, progress("p")) // not terminal yet
			st.passes(t, Client, `{"jsonrpc":"2.0","id":101,"method":"tasks/get","params":{"taskId":"T"}}`)
			st.passes(t, Server, `{"jsonrpc":"2.0","id":101,"result":{"taskId":"T","status":"completed"}}`)
		},
		"tasks/result": func(st *silenceTracker) {
			st.passes(t, Client, `{"jsonrpc":"2.0","id":100,"method":"tasks/result","params":{"taskId":"T"}}`)
			st.passes(t, Server, `{"jsonrpc":"2.0","id":100,"result":{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"T"}}}}`)
		},
		"tasks/cancel": func(st *silenceTracker) {
			st.passes(t, Client, `{"jsonrpc":"2.0","id":100,"method":"tasks/cancel","params":{"taskId":"T"}}`)
			st.passes(t, Server, `{"jsonrpc":"2.0","id":100,"result":{"taskId":"T","status":"cancelled"}}`)
		},
		"notifications/tasks/status": func(st *silenceTracker) {
			st.passes(t, Server, `{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"T","status":"input_required"}}`)
			st.passes(t, Server, progress("p"))
			st.passes(t, Server, `{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"T","status":"failed"}}`)
		},
		"ttl": func(st *silenceTracker) {
			st.now = st.now.Add(59 * time.Second)
			st.passes(t, Server, progress("p"))
			st.now = st.now.Add(time.Second)
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			st := newSilenceTracker()
			st.passes(t, Client, call(1, "p"))
			st.passes(t, Server, created(1, "T", "60000"))
			st.passes(t, Server, progress("p")) // the task runs on: its token lives
			st.passes(t, Server, tagged("T"))
			end(st)
			st.silenced(t, Server, progress("p"))
			st.silenced(t, Server, tagged("T")) // a message about the ended task
			st.passes(t, Server, tagged("U"))   // about another
		})
	}
	t.Run("null ttl", func(t *testing.T) {
		st := newSilenceTracker()
		st.passes(t, Client, call(1, "p"))
		st.passes(t, Server, created(1, "T", "null"))
		st.now = st.now.Add(24 * time.Hour)
		st.passes(t, Server, progress("p")) // no ttl: until the task ends
	})
	t.Run("no task asked", func(t *testing.T) {
		st := newSilenceTracker()
		st.passes(t, Client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p"}}}`)
		st.passes(t, Server, created(1, "T", "60000")) // a server that made one unasked keeps no token
		st.silenced(t, Server, progress("p"))
	})
}

func itoa(n int) string { return framing.IntID(int64(n)).String() }
