package stdio_test

import (
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// submitting is a session whose client is a front: its frames are
// submitted, what it is sent is delivered (no In, no Out), over a scripted
// server on pipes.
type submitting struct {
	t          *testing.T
	sess       *stdio.Session
	toProxyS   *io.PipeWriter
	fromProxyS *lineReader
	got        chan string // what was delivered, in order
	closed     chan struct{}
	done       chan error
}

func newSubmitting(t *testing.T) *submitting {
	watchdog(t, 20*time.Second)
	sIn, sInW := io.Pipe()
	sOutR, sOut := io.Pipe()
	s := &submitting{t: t, toProxyS: sInW, fromProxyS: &lineReader{framing.NewReader(sOutR, 0), sOutR},
		got: make(chan string, 64), closed: make(chan struct{}), done: make(chan error, 1)}
	var once sync.Once
	s.sess = stdio.NewSession(stdio.Options{
		Deliver: func(frame []byte, _ *proxy.Call, _ bool) {
			if len(frame) > 0 {
				s.got <- string(frame)
			}
		},
		OnClientClosed: func() { once.Do(func() { close(s.closed) }) },
	})
	go func() { s.done <- s.sess.Run(stdio.Conn{}, stdio.PipeServer(sIn, sOut, upstream.PipeOptions{})) }()
	t.Cleanup(func() {
		sInW.Close()
		sOutR.Close()
		<-s.done
		<-s.sess.ReaderDone()
	})
	return s
}

func (s *submitting) submit(line string) error {
	s.t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(line)); err != nil {
		s.t.Fatal(err)
	}
	return s.sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(*stdio.Submitted) {})
}

// TestSubmittingClientCloses: a front's client (no In, no Out) is closed by
// CloseClient: the server gets what was submitted before, then its input
// ends, OnClientClosed runs and ReaderDone closes; nothing more is
// submitted. The server's answers came to Deliver in order.
func TestSubmittingClientCloses(t *testing.T) {
	s := newSubmitting(t)
	for _, id := range []string{"1", "2", "3"} {
		if err := s.submit(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"1", "2", "3"} {
		if got := string(next(t, s.fromProxyS, "server")); !strings.Contains(got, `"id":`+id) {
			t.Fatalf("the server got %s, want request %s", got, id)
		}
	}
	for _, id := range []string{"1", "2", "3"} {
		write(t, s.toProxyS, `{"jsonrpc":"2.0","id":`+id+`,"result":{}}`)
	}
	for _, id := range []string{"1", "2", "3"} {
		if got := <-s.got; !strings.Contains(got, `"id":`+id) {
			t.Fatalf("delivered %s, want the answer to %s", got, id)
		}
	}
	s.sess.CloseClient()
	s.sess.CloseClient() // a second time does nothing
	<-s.closed
	<-s.sess.ReaderDone()
	if _, err := s.fromProxyS.r.Read(nil); err != io.EOF {
		t.Errorf("the server's input: %v, want its end", err)
	}
	if err := s.submit(`{"jsonrpc":"2.0","id":4,"method":"ping"}`); !errors.Is(err, stdio.ErrEnded) {
		t.Errorf("a submit after CloseClient: %v, want ErrEnded", err)
	}
}

// TestSubmittingClientServerGone: when the server's output ends first, a
// front's client gets the proxy's error for what is in flight, Run
// returns ErrServerGone, and ReaderDone closes without a CloseClient.
func TestSubmittingClientServerGone(t *testing.T) {
	s := newSubmitting(t)
	if err := s.submit(callTool); err != nil {
		t.Fatal(err)
	}
	next(t, s.fromProxyS, "server")
	s.toProxyS.Close()
	if got := <-s.got; !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"error"`) {
		t.Errorf("delivered %s, want the proxy's error for request 1", got)
	}
	if err := <-s.done; !errors.Is(err, stdio.ErrServerGone) {
		t.Errorf("Run: %v, want ErrServerGone", err)
	}
	s.done <- nil // for the cleanup
	<-s.sess.ReaderDone()
	select {
	case <-s.closed:
		t.Error("OnClientClosed ran for a client that never closed")
	default:
	}
}
