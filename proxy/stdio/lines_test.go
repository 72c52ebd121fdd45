package stdio_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// listening is a Conn whose own traffic (Listen) is what its test feeds.
type listening struct{ st *fed }

func (c listening) Send(context.Context, []byte, []*proxy.Call, upstream.Along) (upstream.Stream, error) {
	return nil, nil
}
func (c listening) Listen(context.Context) (upstream.Stream, error) { return c.st, nil }
func (c listening) Cancel(*proxy.Call, []byte) error                { return nil }
func (c listening) Close() error                                    { c.st.Close(); return nil }

// fed is a Stream of the messages its test feeds; asked tells each call
// of Next.
type fed struct {
	msgs   chan []byte
	asked  chan struct{}
	closed chan struct{}
}

func (s *fed) Next() ([]byte, error) {
	s.asked <- struct{}{}
	select {
	case m := <-s.msgs:
		return m, nil
	case <-s.closed:
		return nil, io.EOF
	}
}

func (s *fed) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}

// received is a stdio.Receiver that tells what it got, and, if more is
// set, whether each frame in a buffer came with another at hand.
type received struct {
	got   chan string
	ended chan struct{}
	more  chan bool
}

func (r *received) Receive(frame []byte, parsed *framing.Frame) {
	if parsed != nil {
		if string(parsed.Msgs[0].Raw) != string(frame) {
			panic("a parsed frame that is not the frame received")
		}
		r.got <- "parsed " + string(frame)
		return
	}
	r.got <- string(frame)
}
func (r *received) End()                                 { close(r.ended) }
func (r *received) TooLarge(*framing.FrameTooLargeError) {}
func (r *received) ReceiveBuf(b *wire.Buf, more bool) {
	r.Receive(b.B, nil)
	wire.PutBuf(b)
	if r.more != nil {
		r.more <- more
	}
}

// TestLinesSayWhenABurstEnds: a stdio server's lines that come in one
// read reach the session each saying that another is at hand, but the
// last, so that what the session decided of them is written at once, a
// burst at a time, as the wrapper's relay always wrote them.
func TestLinesSayWhenABurstEnds(t *testing.T) {
	out, server := io.Pipe()
	in, drain := io.Pipe()
	go io.Copy(io.Discard, in)
	l := stdio.NewLines(upstream.NewPipeConn(out, drain, upstream.PipeOptions{}))
	r := &received{got: make(chan string, 8), ended: make(chan struct{}), more: make(chan bool, 8)}
	l.Conn().Push.PushTo(r)
	server.Write([]byte("{\"a\":1}\n{\"b\":2}\n\n{\"c\":3}\n"))
	var got []bool
	for range 3 {
		<-r.got
		got = append(got, <-r.more)
	}
	if want := []bool{true, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("another frame at hand: %v, want %v", got, want)
	}
	server.Close()
	<-r.ended
	l.Stop()
	<-l.Exited()
}

// TestLinesPushToTheSession: a session that asks Lines to hand it the
// messages (PushTo) gets first what came before it asked (kept for it
// meanwhile), then each as it comes, a message spread
// over lines as one line; the Conn's end is its End.
func TestLinesPushToTheSession(t *testing.T) {
	st := &fed{msgs: make(chan []byte), asked: make(chan struct{}, 8), closed: make(chan struct{})}
	l := stdio.NewLines(listening{st})
	<-st.asked
	st.msgs <- []byte(`{"jsonrpc":"2.0","method":"a"}`)
	<-st.asked // the first was handed over: queued, nobody having asked
	r := &received{got: make(chan string, 8), ended: make(chan struct{})}
	l.Conn().Push.PushTo(r)
	st.msgs <- []byte("{\"jsonrpc\":\"2.0\",\n\"method\":\"b\"}")
	for _, want := range []string{`{"jsonrpc":"2.0","method":"a"}`, `{"jsonrpc":"2.0","method":"b"}`} {
		select {
		case got := <-r.got:
			if got != want {
				t.Errorf("received %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing received, want %s", want)
		}
	}
	l.Stop()
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("no End after Stop")
	}
	<-l.Exited()
}

// TestLinesPushedAfterTheEnd: a session that asks for the messages after
// the Conn ended (an HTTP+SSE server that closed its stream at once) gets
// what came, then its End: it does not wait for ever.
func TestLinesPushedAfterTheEnd(t *testing.T) {
	st := &fed{msgs: make(chan []byte), asked: make(chan struct{}, 8), closed: make(chan struct{})}
	l := stdio.NewLines(listening{st})
	<-st.asked
	l.Stop()
	<-l.Exited()
	r := &received{got: make(chan string, 8), ended: make(chan struct{})}
	l.Conn().Push.PushTo(r)
	select {
	case <-r.ended:
	default:
		t.Fatal("no End for a session that asked after the end")
	}
}

// parsing is a fed Stream that parsed what it feeds, as a JSON answer's
// is (upstream.Parsed).
type parsing struct {
	*fed
	f    framing.Frame
	last []byte
}

func (s *parsing) Next() ([]byte, error) {
	m, err := s.fed.Next()
	s.last = m
	return m, err
}

// Frame implements upstream.Parsed: each message that parses.
func (s *parsing) Frame() *framing.Frame {
	if s.f.Parse(s.last) != nil {
		return nil
	}
	return &s.f
}

// TestLinesHandOverWhatTheStreamParsed: a message its Stream parsed
// already (a JSON answer, checked) reaches the session with its frame,
// without the whitespace around it, so that the session does not parse it
// again; one spread over lines goes as one line, parsed by the session.
func TestLinesHandOverWhatTheStreamParsed(t *testing.T) {
	st := &parsing{fed: &fed{msgs: make(chan []byte), asked: make(chan struct{}, 8), closed: make(chan struct{})}}
	r := &received{got: make(chan string, 8), ended: make(chan struct{})}
	conn := listening{st.fed}
	l := stdio.NewLines(parsingConn{conn, st})
	l.Conn().Push.PushTo(r)
	<-st.asked
	for _, c := range []struct{ send, want string }{
		{`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n", `parsed {"jsonrpc":"2.0","id":1,"result":{}}`},
		{" {\"jsonrpc\":\"2.0\",\n\"id\":2,\"result\":{}}", `{"jsonrpc":"2.0","id":2,"result":{}}`},
	} {
		st.msgs <- []byte(c.send)
		select {
		case got := <-r.got:
			if got != c.want {
				t.Errorf("received %s, want %s", got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing received, want %s", c.want)
		}
	}
	l.Stop()
	<-l.Exited()
}

// parsingConn is listening whose own traffic is a parsing Stream.
type parsingConn struct {
	listening
	st *parsing
}

func (c parsingConn) Listen(context.Context) (upstream.Stream, error) { return c.st, nil }
