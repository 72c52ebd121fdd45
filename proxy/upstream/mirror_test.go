package upstream

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestMirrorHeaders: the headers a 2026-07-28 server matches against the
// body name its method, its tool, prompt, resource or task (in the Base64
// sentinel form where the name is not plain header text: before, it went as
// it was), and the protocol version its _meta names.
func TestMirrorHeaders(t *testing.T) {
	for _, tc := range []struct{ body, method, name, version string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, "tools/call", "echo", "2026-07-28"},
		{`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"gr\u00fc\u00dfe"}}`, "prompts/get", "=?base64?Z3LDvMOfZQ==?=", "old"}, // not ASCII: the sentinel form
		{`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"_meta":{"x":1},"uri":"file:///a b"}}`, "resources/read", "file:///a b", "old"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}`, "tools/list", "", "old"},
		{`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":"t-42"}}`, "tasks/cancel", "t-42", "old"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":" echo"}}`, "tools/call", "=?base64?IGVjaG8=?=", "old"},
		{`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t-\u0041"}}`, "tasks/get", "t-A", "old"},
		{`{"jsonrpc":"2.0","id":1,"method":"tasks/update","params":{"taskId":"u"}}`, "tasks/update", "u", "old"},
	} {
		var f framing.Frame
		if err := f.Parse([]byte(tc.body)); err != nil {
			t.Fatal(err)
		}
		var req fasthttp.Request
		version := "old"
		MirrorHeaders(&req, &f.Msgs[0], &version)
		if got := string(req.Header.Peek("Mcp-Method")); got != tc.method {
			t.Errorf("%s: Mcp-Method %q", tc.body, got)
		}
		if got := string(req.Header.Peek("Mcp-Name")); got != tc.name {
			t.Errorf("%s: Mcp-Name %q, want %q", tc.body, got, tc.name)
		}
		if version != tc.version {
			t.Errorf("%s: version %q, want %q", tc.body, version, tc.version)
		}
	}
}

// TestAnswers: what tells the bridge its request's stream brought the
// answer: a response with its id, alone or in a batch; not a notification,
// not another id.
func TestAnswers(t *testing.T) {
	id := framing.IntID(7)
	for _, c := range []struct {
		data string
		want bool
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{}}`, true},
		{`{"jsonrpc":"2.0","result":{},"id":7}`, true},
		{`{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}`, true},
		{`[{"jsonrpc":"2.0","id":8,"result":{}},{"jsonrpc":"2.0","id":7,"result":{}}]`, true},
		{`{"jsonrpc":"2.0","id":"7","result":{}}`, false},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}`, false},
		{`{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}`, false},
	} {
		if got := answers([]byte(c.data), id); got != c.want {
			t.Errorf("answers(%s) = %v, want %v", c.data, got, c.want)
		}
	}
}
