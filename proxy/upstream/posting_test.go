package upstream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestBeforeCancel: a cancel waits for its request to be written, then for
// its headers or TakenInWait, whichever is first; a nil Posting and a
// hurry wait for nothing.
func TestBeforeCancel(t *testing.T) {
	clk := clock.NewFake(time.Now())
	waited := func(p *Posting, hurry chan struct{}) <-chan struct{} {
		done := make(chan struct{})
		go func() { p.BeforeCancel(clk, hurry); close(done) }()
		return done
	}
	wait := func(what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting", what)
		}
	}
	wait("nil", waited(nil, nil))

	p := NewPosting()
	armed := clk.Armed()
	done := waited(p, nil)
	p.Close()
	<-armed // written, and no headers: waiting TakenInWait
	select {
	case <-done:
		t.Fatal("did not wait for the headers")
	default:
	}
	clk.Advance(TakenInWait - time.Millisecond)
	select {
	case <-done:
		t.Fatal("waited less than TakenInWait")
	default:
	}
	clk.Advance(time.Millisecond)
	wait("TakenInWait passed", done)

	p = NewPosting()
	p.Close()
	armed = clk.Armed()
	done = waited(p, nil)
	<-armed
	p.Headed()
	p.Headed() // again: nothing
	wait("headed", done)

	p = NewPosting() // never written, then failed
	done = waited(p, nil)
	p.Headed()
	wait("failed unwritten", done)

	hurry := make(chan struct{})
	done = waited(NewPosting(), hurry) // never written
	close(hurry)
	wait("hurried", done)
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers left set", n)
	}
}

// TestCutBeforeHeaders: a POST whose server sends no headers until it
// answers is cancelled by Cut, which closes its connection: the server
// sees the connection end, and the send fails at once. A Cut after the
// headers does nothing (the answer's body is then what to close), and a
// Cut before the request is written fails it unsent.
func TestCutBeforeHeaders(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read, closed := make(chan struct{}), make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.ReadAll(req.Body)
		close(read)
		br.ReadByte() // no answer: waits for the client's close
		close(closed)
	}()
	e := Endpoint{URL: mustURL(t, "http://"+ln.Addr().String()+"/mcp"), Client: NewClient(0, 0)}
	p := NewPosting()
	failed := make(chan error, 1)
	go func() {
		_, err := e.Do(Request{Body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`), Posting: p}, 0)
		failed <- err
	}()
	<-read // the server has the request, and answers nothing
	if !p.Cut() || !p.WasCut() {
		t.Fatal("Cut before the headers did not cut")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's connection is still open after the Cut")
	}
	if err := <-failed; err == nil {
		t.Error("the cut POST did not fail")
	}
	if p.Cut() {
		t.Error("a second Cut cut again")
	}
	if p.Unsent() {
		t.Error("a POST the server read is said to be unsent")
	}

	headed := NewPosting()
	headed.Headed()
	if headed.Cut() {
		t.Error("Cut after the headers cut")
	}
	early := NewPosting()
	early.Cut()
	if _, err := e.Do(Request{Body: []byte(`{}`), Posting: early}, 0); err == nil {
		t.Error("a POST cut before it was written was sent")
	}
	if !early.Unsent() {
		t.Error("a POST cut before it was written is not said to be unsent")
	}
}

// TestBeforeCancelAcrossResends: a cancel waits for its request, which is
// written, found not sent and rewound (keepalive's resend), and written
// again, the wait's timer firing at each point in turn; each write sets
// the wait's timer anew. Before, the timer of the first write closed
// whatever channel the wait held when it fired: nil after the rewind
// (panic: close of nil channel, seen under load through the bridge), or
// the second write's, which its own timer then closed again; and a write
// after a rewind the wait had not seen set no timer of its own.
func TestBeforeCancelAcrossResends(t *testing.T) {
	for i := range 500 {
		clk := clock.NewFake(time.Now())
		p := NewPosting()
		done := make(chan struct{})
		armed := clk.Armed()
		go func() { p.BeforeCancel(clk, nil); close(done) }()
		writes := 1 + i%3
		for w := range writes {
			if w > 0 {
				p.Rewind()
			}
			p.Close()
			select { // the wait has seen this write, and set its timer anew
			case <-armed:
			case <-time.After(10 * time.Second):
				t.Fatalf("iteration %d: write %d set no timer", i, w+1)
			}
			armed = clk.Armed()
			if i%2 == 1 && w < writes-1 {
				clk.Advance(TakenInWait / 2) // a stale timer may fire later
			}
		}
		clk.Advance(TakenInWait)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("iteration %d: the cancel still waits after %d writes", i, writes)
		}
		if n := clk.Pending(); n != 0 {
			t.Fatalf("iteration %d: %d timers left set", i, n)
		}
	}
}
