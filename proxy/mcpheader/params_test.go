package mcpheader

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestParamsRefusesInvalidAnnotations: the conformance suite's invalid
// tools (http-invalid-tool-headers) and annotations off the properties
// chain make a tool invalid; a valid one, nested properties included, is
// read with its path.
func TestParamsRefusesInvalidAnnotations(t *testing.T) {
	for name, schema := range map[string]string{
		"empty":          `{"type":"object","properties":{"value":{"type":"string","x-mcp-header":""}}}`,
		"object":         `{"type":"object","properties":{"data":{"type":"object","x-mcp-header":"Data"}}}`,
		"array":          `{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"},"x-mcp-header":"Items"}}}`,
		"null":           `{"type":"object","properties":{"nil":{"type":"null","x-mcp-header":"Nil"}}}`,
		"number":         `{"type":"object","properties":{"score":{"type":"number","x-mcp-header":"Score"}}}`,
		"duplicate":      `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"Region"}}}`,
		"duplicate case": `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"MyField"},"b":{"type":"string","x-mcp-header":"myfield"}}}`,
		"space":          `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"My Region"}}}`,
		"colon":          `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"Region:Primary"}}}`,
		"non-ASCII":      `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"Région"}}}`,
		"control":        `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":"Region\t1"}}}`,
		"not a string":   `{"type":"object","properties":{"v":{"type":"string","x-mcp-header":7}}}`,
		"under items":    `{"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"L"}}}}`,
		"under oneOf":    `{"type":"object","oneOf":[{"properties":{"v":{"type":"string","x-mcp-header":"V"}}}]}`,
		"under $defs":    `{"type":"object","$defs":{"d":{"type":"string","x-mcp-header":"D"}}}`,
		"on the root":    `{"type":"object","x-mcp-header":"Root"}`,
	} {
		if ps, err := Params([]byte(schema)); err == nil {
			t.Errorf("%s: Params = %v, want an error", name, ps)
		}
	}
	ps, err := Params([]byte(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},` +
		`"opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}},"q":{"type":"string"},` +
		`"flag":{"type":"boolean","x-mcp-header":"Flag","default":{"x-mcp-header":"data, not a schema"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range ps {
		got[p.Name()] = strings.Join(p.Path, ".")
	}
	want := map[string]string{"Mcp-Param-Region": "region", "Mcp-Param-N": "opts.n", "Mcp-Param-Flag": "flag"}
	if !maps.Equal(got, want) {
		t.Errorf("Params = %v, want %v", got, want)
	}
}

// TestValue: how each kind of argument is mirrored, and when none is.
func TestValue(t *testing.T) {
	args := decode(t, `{"s":"us-west1","u":"Hello, 世界","i":42,"f":42.0,"big":9007199254740992,"frac":1.5,`+
		`"b":false,"nil":null,"o":{"n":-7},"obj":{}}`)
	for path, want := range map[string]string{"s": "us-west1", "u": "=?base64?SGVsbG8sIOS4lueVjA==?=", "i": "42", "f": "42",
		"b": "false", "o.n": "-7"} {
		if got, ok := (Param{Path: strings.Split(path, ".")}).Value(args); !ok || got != want {
			t.Errorf("%s: %q, %v; want %q", path, got, ok, want)
		}
	}
	for _, path := range []string{"big", "frac", "nil", "absent", "obj", "s.x"} {
		if got, ok := (Param{Path: strings.Split(path, ".")}).Value(args); ok {
			t.Errorf("%s: %q, want no header", path, got)
		}
	}
}

func decode(t *testing.T, s string) map[string]any {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestToolsLearnAndMirror: a tools/list answer is kept whole when every
// tool is valid, and without the invalid ones otherwise; a tools/call of a
// tool learned gets its parameters' headers.
func TestToolsLearnAndMirror(t *testing.T) {
	var tools Tools
	valid := `{"name":"execute_sql","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"query":{"type":"string"}}}}`
	if kept, rejected := tools.Learn([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + valid + `]}}`)); kept != nil || rejected != nil {
		t.Errorf("all valid: kept %s, rejected %v", kept, rejected)
	}
	kept, rejected := tools.Learn([]byte(`{"jsonrpc":"2.0","id":2,"result":{"tools":[` + valid +
		`,{"name":"bad","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}}],"nextCursor":"c"}}`))
	if len(rejected) != 1 || rejected[0].Tool != "bad" || bytes.Contains(kept, []byte(`"bad"`)) ||
		!bytes.Contains(kept, []byte(`"execute_sql"`)) || !bytes.Contains(kept, []byte(`"nextCursor":"c"`)) {
		t.Errorf("kept %s, rejected %v", kept, rejected)
	}
	set := map[string]string{}
	known := tools.Mirror("execute_sql", []byte(`{"name":"execute_sql","arguments":{"region":" eu ","query":"SELECT 1"}}`),
		func(h, v string) { set[h] = v })
	if !known || !maps.Equal(set, map[string]string{"Mcp-Param-Region": "=?base64?IGV1IA==?="}) {
		t.Errorf("Mirror: known %v, headers %v", known, set)
	}
	if tools.Mirror("never_listed", []byte(`{}`), func(h, v string) { t.Errorf("header %s for an unknown tool", h) }) {
		t.Error("an unlisted tool is known")
	}
	if slices.ContainsFunc(rejected, func(r Rejected) bool { return r.Why == nil }) {
		t.Error("a rejection without its reason")
	}
}

// FuzzParams: any schema gives valid parameters (tokens, unique, each
// with a path) or an error, never a crash.
func FuzzParams(f *testing.F) {
	f.Add(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)
	f.Add(`{"type":"object","properties":{"a":{"properties":{"b":{"type":"integer","x-mcp-header":"B"}}}}}`)
	f.Add(`{"oneOf":[{"x-mcp-header":"X"}]}`)
	f.Fuzz(func(t *testing.T, schema string) {
		ps, err := Params([]byte(schema))
		if err != nil {
			return
		}
		for i, p := range ps {
			if !token(p.Header) || len(p.Path) == 0 {
				t.Fatalf("Params(%s): %+v", schema, p)
			}
			for _, q := range ps[:i] {
				if strings.EqualFold(p.Header, q.Header) {
					t.Fatalf("Params(%s): %q twice", schema, p.Header)
				}
			}
		}
	})
}

// TestCheck: a server's check of a tools/call's Mcp-Param headers against
// its arguments, with the conformance suite's cases (a valid Base64 value,
// bad padding, bad characters, a literal that only looks encoded, a
// missing header).
func TestCheck(t *testing.T) {
	var tools Tools
	tools.Learn([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{"type":"object","properties":{` +
		`"s":{"type":"string","x-mcp-header":"S"},"n":{"type":"integer","x-mcp-header":"N"},"b":{"type":"boolean","x-mcp-header":"B"}}}}]}}`))
	for _, tc := range []struct {
		args    string
		headers map[string]string
		ok      bool
	}{
		{`{"s":"Hello","n":42,"b":true}`, map[string]string{"Mcp-Param-S": "=?base64?SGVsbG8=?=", "Mcp-Param-N": "42.0", "Mcp-Param-B": "true"}, true},
		{`{"s":"Hello"}`, map[string]string{"Mcp-Param-S": "=?base64?SGVsbG8?="}, false},
		{`{"s":"Hello"}`, map[string]string{"Mcp-Param-S": "=?base64?SGVs!!!bG8=?="}, false},
		{`{"s":"SGVsbG8="}`, map[string]string{"Mcp-Param-S": "SGVsbG8="}, true},
		{`{"s":"=?base64?SGVsbG8="}`, map[string]string{"Mcp-Param-S": "=?base64?SGVsbG8="}, true},
		{`{"s":"test-value"}`, map[string]string{}, false},
		{`{"s":null}`, map[string]string{}, true},
		{`{}`, map[string]string{"Mcp-Param-N": "1"}, false},
		{`{"n":7}`, map[string]string{"Mcp-Param-N": "8"}, false},
		{`{"b":false}`, map[string]string{"Mcp-Param-B": "False"}, false},
	} {
		err := tools.Check("t", []byte(`{"name":"t","arguments":`+tc.args+`}`), func(name string) []byte {
			if v, ok := tc.headers[name]; ok {
				return []byte(v)
			}
			return nil
		})
		if (err == nil) != tc.ok {
			t.Errorf("%s %v: %v, want agreement %v", tc.args, tc.headers, err, tc.ok)
		}
	}
	if err := tools.Check("unlisted", []byte(`{"arguments":{"s":"x"}}`), func(string) []byte { return nil }); err != nil {
		t.Errorf("an unlisted tool: %v", err)
	}
}
