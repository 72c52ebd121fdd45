package upstream_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// pipes returns a PipeConn over two OS pipes, and the server's ends: what
// it reads (the proxy's lines) and where it writes.
func pipes(t *testing.T, max int) (*upstream.PipeConn, *os.File, *os.File) {
	t.Helper()
	toR, toW, fromR, fromW := osPipes(t)
	c := upstream.NewPipeConn(fromR, toW, upstream.PipeOptions{MaxFrameSize: max, Stop: func() { fromW.Close() }})
	t.Cleanup(func() { c.Close(); toR.Close(); fromR.Close() })
	return c, toR, fromW
}

// TestPipeConnKeepsACancelBehindItsRequest: Send never waits for a
// server that does not read; a cancel never reaches the server before its
// request: the cancel of a request still queued withdraws both (neither is
// written), and one of a request being written goes as soon as it is,
// ahead of what is queued after it. Which of the two a request queued
// behind a frame the pipe could not take meets depends on whether a flush
// had offered it to the pipe, so both are allowed.
func TestPipeConnKeepsACancelBehindItsRequest(t *testing.T) {
	c, server, _ := pipes(t, 0)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + strings.Repeat("x", 1<<20) + `"}}`
	second := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"q"}}`
	cancel1 := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
	cancel2 := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`
	last := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	first, queued := new(proxy.Call), new(proxy.Call)
	send := func(frame string, calls ...*proxy.Call) {
		t.Helper()
		if st, err := c.Send(context.Background(), []byte(frame), calls, upstream.Along{}); st != nil || err != nil {
			t.Fatalf("Send: %v, %v; want neither a Stream nor an error", st, err)
		}
	}
	send(big, first) // far more than a pipe holds: written in part
	send(second, queued)
	c.Cancel(queued, []byte(cancel2))
	c.Cancel(first, []byte(cancel1))
	send(last)
	go c.Close() // once read: everything written, the input closed
	rd := bufio.NewReaderSize(server, 2<<20)
	at := map[string]int{}
	n := 0
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		at[strings.TrimSuffix(line, "\n")] = n + 1 // 1-based: 0 is "never"
		n++
	}
	if at[last] == 0 {
		t.Fatalf("lost a frame: %d lines", n)
	}
	for _, p := range [][2]string{{big, cancel1}, {second, cancel2}} {
		req, cancel := at[p[0]], at[p[1]]
		if (req == 0) != (cancel == 0) || cancel < req {
			t.Errorf("a request at %d, its cancel at %d: want both, the cancel after, or neither", req, cancel)
		}
	}
	if hasWritev && at[big] != 1 { // the flush wrote it in part at once: it can no longer be withdrawn
		t.Errorf("the big call came at %d of %d lines, want first", at[big], n)
	}
}

// TestPipeConnListens: the server's lines come on Listen, one each; a line
// over the limit is skipped and said (a FrameTooLargeError that names it),
// the stream going on; the end of the server's output ends the stream with
// ErrSessionEnded, and Listen is for one reader.
func TestPipeConnListens(t *testing.T) {
	c, _, server := pipes(t, 100)
	st, err := c.Listen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Listen(context.Background()); err == nil {
		t.Error("a second Listen was let in")
	}
	go func() {
		io.WriteString(server, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n\n"+
			`{"jsonrpc":"2.0","id":2,"result":{"text":"`+strings.Repeat("y", 200)+`"}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`+"\n")
		server.Close()
	}()
	if m, err := st.Next(); err != nil || string(m) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("Next = %s, %v", m, err)
	}
	_, err = st.Next()
	if tl, ok := errors.AsType[*framing.FrameTooLargeError](err); !ok || !strings.Contains(string(tl.Head), `"id":2`) {
		t.Fatalf("Next = %v, want the over-long answer to 2 said", err)
	}
	if m, err := st.Next(); err != nil || !strings.Contains(string(m), "notifications/message") {
		t.Fatalf("Next = %s, %v", m, err)
	}
	if _, err := st.Next(); !errors.Is(err, upstream.ErrSessionEnded) {
		t.Fatalf("Next at the end = %v, want ErrSessionEnded", err)
	}
}

// TestPipeConnLendsItsLines: the server's lines come in frame buffers that
// are the reader's (upstream.Lent: the session keeps them without a copy),
// a line over the limit said as Next says it, the end as ErrSessionEnded.
func TestPipeConnLendsItsLines(t *testing.T) {
	c, _, server := pipes(t, 100)
	st, err := c.Listen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lent, ok := st.(upstream.Lent)
	if !ok {
		t.Fatal("a PipeConn's stream does not lend its lines")
	}
	go func() {
		io.WriteString(server, `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n"+strings.Repeat("z", 300)+"\n"+`{"jsonrpc":"2.0","id":3,"result":{}}`+"\n")
		server.Close()
	}()
	first, err := lent.NextBuf()
	if err != nil || string(first.B) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("NextBuf = %v", err)
	}
	if _, err := lent.NextBuf(); !errors.As(err, new(*framing.FrameTooLargeError)) {
		t.Fatalf("NextBuf = %v, want the over-long line said", err)
	}
	third, err := lent.NextBuf()
	if err != nil || string(third.B) != `{"jsonrpc":"2.0","id":3,"result":{}}` {
		t.Fatalf("NextBuf = %v", err)
	}
	if string(first.B) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Error("a lent line changed under its reader")
	}
	wire.PutBuf(first)
	wire.PutBuf(third)
	if _, err := lent.NextBuf(); !errors.Is(err, upstream.ErrSessionEnded) {
		t.Fatalf("NextBuf at the end = %v, want ErrSessionEnded", err)
	}
}
