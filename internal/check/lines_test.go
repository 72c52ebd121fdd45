package check

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"go.uber.org/goleak"
)

// TestOverConnSpeaksLines: the checker's lines reach a server reached as
// a Conn (a stdio server's pipes) as they were written, its cancel naming
// the request it opened; the server's lines come back on In, In ends when
// the server's output does, and Stop leaves no goroutine behind.
func TestOverConnSpeaksLines(t *testing.T) {
	defer goleak.VerifyNone(t, leaktest.ProcessWide...) // after Stop: its readers have ended
	toServer, proxyOut := io.Pipe()
	proxyIn, fromServer := io.Pipe()
	l := OverConn(upstream.NewPipeConn(proxyIn, proxyOut, upstream.PipeOptions{}))
	defer l.Stop()
	server := bufio.NewReader(toServer)
	client := bufio.NewReader(l.In)
	req := `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x"}}`
	cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}`
	for _, line := range []string{req, cancel} { // each once the one before it was read (a request still queued is withdrawn with its cancel)
		go io.WriteString(l.Out, line+"\n")
		if got, err := server.ReadString('\n'); err != nil || strings.TrimSpace(got) != line {
			t.Fatalf("the server read %q, %v; want %s", got, err, line)
		}
	}
	answer := `{"jsonrpc":"2.0","id":"a","result":{}}`
	go func() { io.WriteString(fromServer, answer+"\n"); fromServer.Close() }()
	if got, err := client.ReadString('\n'); err != nil || strings.TrimSpace(got) != answer {
		t.Fatalf("the checker read %q, %v; want %s", got, err, answer)
	}
	if got, err := client.ReadString('\n'); err != io.EOF {
		t.Errorf("after the server's end: %q, %v; want EOF", got, err)
	}
}
