package lines

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.ProcessWide...) }

// server is a Backend over pipes: the lines the session writes it arrive
// on got, in order; what it says is written to says.
type server struct {
	says    *io.PipeWriter
	got     chan []byte // closed once the session has closed the server's input
	conn    stdio.Conn
	exited  chan struct{}
	stopped chan struct{}
}

func newServer() *server {
	out, says := io.Pipe()
	in, wrote := io.Pipe()
	s := &server{says: says, got: make(chan []byte, 64), exited: make(chan struct{}), stopped: make(chan struct{}, 1)}
	s.conn = stdio.PipeServer(out, wrote, upstream.PipeOptions{})
	go func() { // ends when the session closes the server's input
		defer close(s.got)
		rd := framing.NewReader(in, 0)
		for {
			line, err := rd.Read(nil)
			if err != nil {
				return
			}
			s.got <- line
		}
	}()
	return s
}

func (s *server) Conn() stdio.Conn        { return s.conn }
func (s *server) Exited() <-chan struct{} { return s.exited }
func (s *server) Stop() {
	select {
	case s.stopped <- struct{}{}:
		s.says.Close()
		close(s.exited)
	default:
	}
}

// say writes one line of the server's.
func (s *server) say(line string) { io.WriteString(s.says, line+"\n") }

// TestSessionRelaysAndStops: a client's request reaches the server and its
// answer the client; Stop cancels the request still in flight on the
// server (the client gets -32000 for it), closes the client's side, stops
// the server, and the session is Done.
func TestSessionRelaysAndStops(t *testing.T) {
	srv := newServer()
	routed := make(chan string, 8)
	deliver := func(frame []byte, _ *proxy.Call, _ bool) {
		if len(frame) > 0 {
			routed <- string(frame)
		}
	}
	ls := New(srv, stdio.Options{Deliver: deliver}, time.Second, nil, zap.NewNop())
	ended := make(chan struct{})
	ls.Start(func() { close(ended) }, nil)
	submit := func(line string) {
		t.Helper()
		var f framing.Frame
		if err := f.Parse([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if err := ls.Sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(*stdio.Submitted) {}); err != nil {
			t.Fatal(err)
		}
	}
	submit(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`)
	if line := <-srv.got; !strings.Contains(string(line), `"id":1`) {
		t.Fatalf("the server got %s", line)
	}
	srv.say(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	if got := <-routed; !strings.Contains(got, `"result"`) {
		t.Fatalf("the client got %s", got)
	}
	submit(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}`)
	<-srv.got
	if n := ls.InFlight(); n != 1 {
		t.Fatalf("%d in flight, want 1", n)
	}
	ls.StopAndWait(proxy.SourceShutdown, "stopping")
	if line := <-srv.got; !strings.Contains(string(line), "notifications/cancelled") {
		t.Errorf("the server got %s, want the cancel of request 2", line)
	}
	if got := <-routed; !strings.Contains(got, "-32000") || !strings.Contains(got, `"id":2`) {
		t.Errorf("the client got %s, want -32000 for request 2", got)
	}
	select {
	case <-srv.exited: // the session stops it on a goroutine of its own
	case <-time.After(10 * time.Second):
		t.Error("the server was not stopped")
	}
	<-ended // before Done
	if ls.ID == "" || len(ls.ID) != 32 {
		t.Errorf("session id %q", ls.ID)
	}
}

// TestSessionWithoutAServerYet: a session made without its server (an old
// client's, whose server starts at its first message) dials it at
// Connect, once, and relays from then on; one stopped before it had a
// server ends at once, its end run and Done closed, and dials none later;
// one stopped before Start has its end run by Start.
func TestSessionWithoutAServerYet(t *testing.T) {
	srv := newServer()
	dials := 0
	dial := func() (stdio.Backend, error) { dials++; return srv, nil }
	routed := make(chan string, 8)
	deliver := func(frame []byte, _ *proxy.Call, _ bool) {
		if len(frame) > 0 {
			routed <- string(frame)
		}
	}
	ls := New(nil, stdio.Options{Deliver: deliver}, time.Second, nil, zap.NewNop())
	ls.Start(func() {}, nil)
	for range 2 {
		if err := ls.Connect(dial); err != nil {
			t.Fatal(err)
		}
	}
	if dials != 1 {
		t.Errorf("%d dials, want 1", dials)
	}
	var f framing.Frame
	f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err := ls.Sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(*stdio.Submitted) {}); err != nil {
		t.Fatal(err)
	}
	if line := <-srv.got; !strings.Contains(string(line), `"ping"`) {
		t.Fatalf("the server got %s", line)
	}
	ls.StopAndWait(proxy.SourceShutdown, "stopping")
	if got := <-routed; !strings.Contains(got, "-32000") {
		t.Errorf("the client got %s, want -32000 for the ping", got)
	}

	ended, onEnd := make(chan struct{}), make(chan struct{})
	never := New(nil, stdio.Options{Deliver: deliver}, time.Second, nil, zap.NewNop())
	never.Start(func() { close(ended) }, func() { close(onEnd) })
	never.Stop(proxy.SourceShutdown, "stopping")
	<-ended
	<-onEnd
	<-never.Done()
	never.CloseClient() // a second end does nothing
	if err := never.Connect(dial); !errors.Is(err, ErrEnded) || dials != 1 {
		t.Errorf("Connect after the end: %v, %d dials; want ErrEnded, none", err, dials-1)
	}

	// Stopped before Start (a session evicted as it was added): Start runs
	// its end at once.
	early := New(nil, stdio.Options{Deliver: deliver}, time.Second, nil, zap.NewNop())
	early.StopAndWait(proxy.SourceSessionEnd, "evicted")
	ended, onEnd = make(chan struct{}), make(chan struct{})
	early.Start(func() { close(ended) }, func() { close(onEnd) })
	<-ended
	<-onEnd
}
