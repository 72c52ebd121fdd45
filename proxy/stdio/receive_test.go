package stdio_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// pusher is a server that hands the session its frames (stdio.Pusher),
// and takes what the session sends it as lines.
type pusher struct {
	got  chan stdio.Receiver
	sent chan string
}

func (p *pusher) PushTo(r stdio.Receiver) { p.got <- r }

func (p *pusher) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
		p.sent <- line
	}
	return len(b), nil
}

func (p *pusher) Close() error { return nil }

// delivering is a session whose client is a front: what it is sent comes
// on delivered, in order.
func delivering() (*stdio.Session, chan string) {
	delivered := make(chan string, 64)
	return stdio.NewSession(stdio.Options{Deliver: func(frame []byte, _ *proxy.Call, _ bool) {
		if len(frame) > 0 {
			delivered <- string(frame)
		}
	}}), delivered
}

// TestPushingServer: a server that hands the session its frames itself
// (an upstream connection's streams) is given the session's Receiver
// before the client's first frame; what it hands over is decided as a
// read line is, whether it comes parsed (upstream.Parsed) or not (an
// answer goes to the client, a cancelled request's late
// answer and progress do not, frames of two goroutines at once are all
// decided); its End ends Run as the end of a server's output does: the
// request still in flight gets the proxy's error, Run ErrServerGone.
func TestPushingServer(t *testing.T) {
	watchdog(t, 20*time.Second)
	p := &pusher{got: make(chan stdio.Receiver, 1), sent: make(chan string, 64)}
	sess, delivered := delivering()
	done := make(chan error, 1)
	go func() { done <- sess.Run(stdio.Conn{}, stdio.Conn{Out: p, Push: p}) }()
	r := <-p.got
	submit := func(line string) {
		t.Helper()
		var f framing.Frame
		if err := f.Parse([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if err := sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(*stdio.Submitted) {}); err != nil {
			t.Fatal(err)
		}
		if got := <-p.sent; got != line {
			t.Fatalf("the server got %s, want %s", got, line)
		}
	}
	submit(callTool)
	r.Receive([]byte(progress1), nil)
	r.Receive([]byte(result1), parsedFrame(t, result1)) // as a Stream that parsed it hands it over

	for _, want := range []string{progress1, result1} {
		if got := <-delivered; got != want {
			t.Fatalf("delivered %s, want %s", got, want)
		}
	}

	submit(strings.Replace(callTool, `"id":1`, `"id":2`, 1))
	submit(strings.Replace(cancel1, `"requestId":1`, `"requestId":2`, 1))
	var wg sync.WaitGroup // a late answer and progress, from two streams at once
	late := strings.Replace(result1, `"id":1`, `"id":2`, 1)
	lateFrame := parsedFrame(t, late)
	wg.Go(func() { r.Receive([]byte(late), lateFrame) })
	wg.Go(func() { r.Receive([]byte(progress2), nil) })
	wg.Wait()
	submit(strings.NewReplacer(`"id":1`, `"id":3`, `"p1"`, `"p3"`).Replace(callTool))
	r.End()
	if got := <-delivered; !strings.Contains(got, `"id":3`) || !strings.Contains(got, `"error"`) {
		t.Errorf("delivered %s, want the proxy's error for request 3 alone", got)
	}
	if err := <-done; !errors.Is(err, stdio.ErrServerGone) {
		t.Errorf("Run: %v, want ErrServerGone", err)
	}
	select {
	case got := <-delivered:
		t.Errorf("delivered %s after the end", got)
	default:
	}
	<-sess.ReaderDone()
}

// parsedFrame returns line parsed, as a Stream that parsed it hands it
// over with it (upstream.Parsed).
func parsedFrame(t *testing.T, line string) *framing.Frame {
	t.Helper()
	f := new(framing.Frame)
	if err := f.Parse([]byte(line)); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStartWaitsForItsServerWithNoGoroutine: Start returns at once, and
// while a server that pushes its frames has not ended, the session runs no
// goroutine of its own (Run waited in one, for every line session behind
// the HTTP front); the server's End has done called with what Run would
// have returned, after the request in flight got the proxy's error.
func TestStartWaitsForItsServerWithNoGoroutine(t *testing.T) {
	watchdog(t, 20*time.Second)
	p := &pusher{got: make(chan stdio.Receiver, 1), sent: make(chan string, 64)}
	sess, delivered := delivering()
	before := goleak.IgnoreCurrent()
	done := make(chan error, 1)
	sess.Start(stdio.Conn{Out: p, Push: p}, func(err error) { done <- err })
	r := <-p.got
	if err := goleak.Find(before); err != nil {
		t.Errorf("a goroutine runs while the session waits for its server: %v", err)
	}
	var f framing.Frame
	if err := f.Parse([]byte(callTool)); err != nil {
		t.Fatal(err)
	}
	if err := sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(*stdio.Submitted) {}); err != nil {
		t.Fatal(err)
	}
	if got := <-p.sent; got != callTool {
		t.Fatalf("the server got %s", got)
	}
	r.End()
	if got := <-delivered; !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"error"`) {
		t.Errorf("delivered %s, want the proxy's error for request 1", got)
	}
	if err := <-done; !errors.Is(err, stdio.ErrServerGone) {
		t.Errorf("done with %v, want ErrServerGone", err)
	}
	<-sess.ReaderDone()
}
