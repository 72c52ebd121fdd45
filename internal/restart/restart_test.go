//go:build unix

package restart

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a stdio server that reads two lines and reports them, base64,
// in a log notification (what a new server got from the restart's
// replay), then reads on.
const server = `read a; read b; printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"%s %s"}}\n' ` +
	`"$(printf '%s' "$a" | base64 | tr -d '\n')" "$(printf '%s' "$b" | base64 | tr -d '\n')"; cat > /dev/null`

// linked runs a session whose server side is a Link to server, and returns
// the link, the client's stdin and what the client reads.
func linked(t *testing.T, max int, switchable bool) (*Link, io.Writer, <-chan []byte) {
	t.Helper()
	argv := []string{"sh", "-c", server}
	copts := child.Options{TermAfter: time.Second, KillAfter: time.Second, Logger: zaptest.NewLogger(t)}
	p, err := child.Start(argv, copts)
	if err != nil {
		t.Fatal(err)
	}
	l := New(p, argv, copts, max, zaptest.NewLogger(t), switchable)
	sess := stdio.NewSession(stdio.Options{Logger: zaptest.NewLogger(t), OnRestart: l.Restart})
	l.Session = sess
	cIn, toSess := io.Pipe()
	fromSess, cOut := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, l.Conn(upstream.PipeOptions{})) }()
	got := make(chan []byte, 16)
	go func() {
		rd := framing.NewReader(fromSess, 0)
		for {
			line, err := rd.Read(nil)
			if err != nil {
				close(got)
				return
			}
			got <- append([]byte(nil), line...)
		}
	}()
	t.Cleanup(func() {
		toSess.Close()
		l.Current().Stop()
		<-done
		<-sess.ReaderDone() // the client's reader may log after Run returns
		fromSess.Close()
		for range got {
		}
	})
	return l, toSess, got
}

// reported waits for the server's report of the two lines it read,
// passing over what else the client gets (the error for a request the
// old server took with it).
func reported(t *testing.T, got <-chan []byte) (first, second string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-got:
			var n struct {
				Method string
				Params struct{ Data string } `json:"params"`
			}
			if err := json.Unmarshal(line, &n); err != nil || n.Method != "notifications/message" {
				continue
			}
			a, b, _ := strings.Cut(n.Params.Data, " ")
			da, _ := base64.StdEncoding.DecodeString(a)
			db, _ := base64.StdEncoding.DecodeString(b)
			return string(da), string(db)
		case <-timeout:
			t.Fatal("the server reported nothing")
			return "", ""
		}
	}
}

const (
	initialize  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	initialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// TestRestartReplaysTheHandshake: a restart starts a new server and gives
// it the client's initialize, under an id of the proxy's (its answer kept
// from the client), then the client's notifications/initialized; the old
// server is stopped and the session goes on with the new one.
func TestRestartReplaysTheHandshake(t *testing.T) {
	l, client, got := linked(t, 2, true)
	io.WriteString(client, initialize+"\n"+initialized+"\n")
	if a, b := reported(t, got); a != initialize || b != initialized {
		t.Fatalf("the first server read %q, %q", a, b)
	}
	old := l.Current()
	if !l.Restart("a cancel was not obeyed") {
		t.Fatal("the restart was refused")
	}
	a, b := reported(t, got)
	if !strings.Contains(a, `"method":"initialize"`) || !strings.Contains(a, `"clientInfo":{"name":"c","version":"1"}`) ||
		strings.Contains(a, `"id":1,`) || b != initialized {
		t.Errorf("the new server read %q, %q; want the client's initialize under another id, then initialized", a, b)
	}
	select {
	case <-old.Exited():
	case <-time.After(10 * time.Second):
		t.Error("the old server was not stopped")
	}
	if l.Current() == old {
		t.Error("the link still names the old server")
	}
}

// TestRestartRefuses: no restart before the client's initialize was seen
// (nothing to replay), none beyond the allowed number, and none on a link
// no rule may restart.
func TestRestartRefuses(t *testing.T) {
	l, client, got := linked(t, 1, true)
	if l.Restart("too early") {
		t.Error("restarted before any initialize was seen")
	}
	io.WriteString(client, initialize+"\n"+initialized+"\n")
	reported(t, got)
	if !l.Restart("first") {
		t.Fatal("the first restart was refused")
	}
	reported(t, got)
	if l.Restart("second") {
		t.Error("a second restart within the period, with one allowed")
	}
	fixed, client2, got2 := linked(t, 5, false)
	io.WriteString(client2, initialize+"\n"+initialized+"\n")
	reported(t, got2)
	if fixed.Restart("not switchable") {
		t.Error("a link no rule may restart restarted")
	}
}
