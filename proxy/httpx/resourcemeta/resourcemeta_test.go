package resourcemeta

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const up = "http://10.0.0.5:8080/.well-known/oauth-protected-resource/mcp"

func upstreams(u string) bool { return strings.HasPrefix(u, "http://10.0.0.5:8080/") }

// TestChallenge: the resource_metadata of a challenge that names the
// upstream is pointed at the relay, quoted or not, in any case, among
// other parameters and challenges; one naming another host, a parameter
// whose name only ends in resource_metadata, and a challenge without it
// are left as they are.
func TestChallenge(t *testing.T) {
	const to = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
	for _, tc := range []struct{ in, want string }{
		{`Bearer resource_metadata="` + up + `"`, `Bearer resource_metadata="` + to + `"`},
		{`Bearer realm="x", Resource_Metadata=` + up + `, scope="a b"`, `Bearer realm="x", resource_metadata="` + to + `", scope="a b"`},
		{`Bearer error="insufficient_scope", scope="files:write", resource_metadata = "` + up + `"`,
			`Bearer error="insufficient_scope", scope="files:write", resource_metadata="` + to + `"`},
		{`Bearer x_resource_metadata="` + up + `", resource_metadata="` + up + `"`, `Bearer x_resource_metadata="` + up + `", resource_metadata="` + to + `"`},
		{`Bearer resource_metadata="https://auth.example.com/meta"`, `Bearer resource_metadata="https://auth.example.com/meta"`},
		{`Bearer realm="mcp"`, `Bearer realm="mcp"`},
		{`Bearer resource_metadata`, `Bearer resource_metadata`},
		{`Bearer resource_metadata="` + up, `Bearer resource_metadata="` + up}, // unterminated: no URL of the upstream's
	} {
		if got := string(Challenge([]byte(tc.in), upstreams, to)); got != tc.want {
			t.Errorf("Challenge(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	if got := string(Challenge([]byte(`Bearer resource_metadata="`+up+`"`), upstreams, `http://a"b\c`)); got != `Bearer resource_metadata="http://a\"b\\c"` {
		t.Errorf("a URL with a quote: %s", got)
	}
}

// TestDocument: the metadata's resource is set to the relay's endpoint
// when it names the upstream's, with or without a trailing slash, and the
// other members are kept; a document naming another resource, or not a
// JSON object, is left as it is.
func TestDocument(t *testing.T) {
	body := `{"resource":"http://10.0.0.5:8080/mcp/","authorization_servers":["https://auth.example.com"],"scopes_supported":["a"]}`
	out, ok := Document([]byte(body), "http://10.0.0.5:8080/mcp", "https://mcp.example.com/mcp")
	var doc map[string]any
	if !ok || json.Unmarshal(out, &doc) != nil || doc["resource"] != "https://mcp.example.com/mcp" || doc["authorization_servers"].([]any)[0] != "https://auth.example.com" || len(doc) != 3 {
		t.Fatalf("Document: %s, %v", out, ok)
	}
	for _, in := range []string{`{"resource":"http://other/mcp"}`, `[1]`, `null`, `{"resource":5}`, `not json`} {
		if out, ok := Document([]byte(in), "http://10.0.0.5:8080/mcp", "x"); ok || string(out) != in {
			t.Errorf("Document(%s) = %s, %v; want it as it is", in, out, ok)
		}
	}
}

// FuzzChallenge: any value is handled without a panic; one without the
// parameter comes back as it is, and one rewritten names the relay.
func FuzzChallenge(f *testing.F) {
	f.Add([]byte(`Bearer resource_metadata="` + up + `", scope="a"`))
	f.Add([]byte(`Bearer realm="x\"y", resource_metadata=` + up))
	f.Add([]byte(`resource_metadata="\`))
	f.Fuzz(func(t *testing.T, v []byte) {
		const to = "https://relay/x"
		out := Challenge(v, func(string) bool { return true }, to)
		if indexFold(v, param) < 0 && !bytes.Equal(out, v) {
			t.Fatalf("changed a value without the parameter: %q -> %q", v, out)
		}
		if !bytes.Equal(out, v) && !bytes.Contains(out, []byte(`resource_metadata="`+to+`"`)) {
			t.Fatalf("rewritten without the relay's URL: %q -> %q", v, out)
		}
	})
}
