package policy

import (
	"encoding/json"
	"testing"
)

func TestPointer(t *testing.T) {
	doc := []byte(`{"a":{"b/c":[10,{"~k":"v"}]},"":1}`)
	for ptr, want := range map[string]string{
		"":              `{"":1,"a":{"b/c":[10,{"~k":"v"}]}}`,
		"/a/b~1c/0":     `10`,
		"/a/b~1c/1/~0k": `"v"`,
		"/":             `1`,
	} {
		p, err := parsePointer(ptr)
		if err != nil {
			t.Fatalf("parsePointer(%q): %v", ptr, err)
		}
		got, ok := p.eval(doc)
		if !ok || string(got) != want {
			t.Errorf("eval(%q) = %s, %v; want %s", ptr, got, ok, want)
		}
	}
	for _, ptr := range []string{"/a/x", "/a/b~1c/2", "/a/b~1c/01", "/a/b~1c/-1"} {
		p, _ := parsePointer(ptr)
		if got, ok := p.eval(doc); ok {
			t.Errorf("eval(%q) = %s, want nothing", ptr, got)
		}
	}
	for _, bad := range []string{"a", "/~", "/~2"} {
		if _, err := parsePointer(bad); err == nil {
			t.Errorf("parsePointer(%q) accepted", bad)
		}
	}
}

// FuzzPointer: any pointer either fails to parse or renders back to
// itself, and evaluating it on any document never panics and yields JSON.
func FuzzPointer(f *testing.F) {
	f.Add("/a/b~1c/0", []byte(`{"a":{"b/c":[1]}}`))
	f.Add("", []byte(`[]`))
	f.Add("/~0/~1", []byte(`{"~":{"/":null}}`))
	f.Fuzz(func(t *testing.T, ptr string, doc []byte) {
		p, err := parsePointer(ptr)
		if err != nil {
			return
		}
		if p.String() != ptr {
			t.Fatalf("%q parsed and rendered as %q", ptr, p.String())
		}
		if v, ok := p.eval(doc); ok && !json.Valid(v) {
			t.Fatalf("eval gave invalid JSON %q", v)
		}
	})
}
