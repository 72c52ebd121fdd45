package framing

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

const (
	testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testState  = "rojo=00f067aa0ba902b7"
)

func TestWithTraceContext(t *testing.T) {
	for _, tc := range []struct{ in, state, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"traceparent":"` + testParent + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`, testState,
			`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"traceparent":"` + testParent + `","tracestate":"` + testState + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{}}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"` + testParent + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"name":"t"}}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"` + testParent + `"},"name":"t"}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":null}}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"` + testParent + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{ }}}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"` + testParent + `" }}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":"p"}}}`, "",
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"` + testParent + `","progressToken":"p"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"runId":"r","traceparent":"00-old","tracestate":"a=b"}}}`, testState,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"runId":"r","traceparent":"` + testParent + `","tracestate":"` + testState + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"tracestate":"a=b","trace\u0070arent":7}}}`, testState,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"tracestate":"` + testState + `","trace\u0070arent":"` + testParent + `"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"00-old"},"arguments":{"traceparent":"keep"}}}`, testState,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"tracestate":"` + testState + `","traceparent":"` + testParent + `"},"arguments":{"traceparent":"keep"}}}`},
	} {
		m := parseOne(t, tc.in)
		got, err := WithTraceContext(m, testParent, tc.state)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tc.in, got, err, tc.want)
			continue
		}
		if p, s := parseOne(t, string(got)).TraceContext(); p != testParent || s != tc.state {
			t.Errorf("%s: read back %q %q", got, p, s)
		}
	}
	for _, in := range []string{`{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}`, `{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":"s"}}`} {
		if _, err := WithTraceContext(parseOne(t, in), testParent, ""); !errors.Is(err, ErrMetaNotObject) {
			t.Errorf("%s: err %v", in, err)
		}
	}
}

func parseOne(t testing.TB, raw string) *Message {
	t.Helper()
	var f Frame
	if err := f.Parse([]byte(raw)); err != nil || f.Batch {
		t.Fatalf("%s: %v", raw, err)
	}
	return &f.Msgs[0]
}

// FuzzWithTraceContext checks that setting the trace context changes
// nothing else: the result decodes, with encoding/json, to the input with
// params._meta's traceparent and tracestate set, and parses to the same
// id and method.
func FuzzWithTraceContext(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"traceparent":"x","progressToken":1}}}`), "s=1")
	f.Add([]byte(`{"jsonrpc":"2.0","id":"q","method":"m"}`), "")
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"method":"m","params":{"_meta":{}}}`), "")
	f.Fuzz(func(t *testing.T, data []byte, state string) {
		var fr Frame
		if fr.Parse(data) != nil || fr.Batch || fr.Msgs[0].Kind != KindRequest {
			return
		}
		m := &fr.Msgs[0]
		out, err := WithTraceContext(m, testParent, state)
		if err != nil {
			return
		}
		var want, got any
		if json.Unmarshal(m.Raw, &want) != nil {
			return // the framing's parser takes a little more than encoding/json
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s -> %s: %v", m.Raw, out, err)
		}
		setTrace(want.(map[string]any), state, m.TraceStateSpan.Found())
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s -> %s", m.Raw, out)
		}
		var back Frame
		if err := back.Parse(out); err != nil || back.Msgs[0].ID != m.ID || back.Msgs[0].Method != m.Method {
			t.Fatalf("%s -> %s: parsed back %v", m.Raw, out, err)
		}
	})
}

// setTrace sets the trace context in a decoded request, as WithTraceContext
// should.
func setTrace(req map[string]any, state string, hadState bool) {
	params, _ := req["params"].(map[string]any)
	if params == nil {
		params = map[string]any{}
		req["params"] = params
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		params["_meta"] = meta
	}
	meta["traceparent"] = testParent
	if state != "" || hadState {
		b, _ := json.Marshal(state) // as JSON holds it: invalid UTF-8 replaced
		var s string
		json.Unmarshal(b, &s)
		meta["tracestate"] = s
	}
}
