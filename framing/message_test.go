package framing_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

func TestParseSingle(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		kind   framing.Kind
		id     framing.ID
		method string
	}{
		{"request int id", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, framing.KindRequest, framing.IntID(1), "tools/call"},
		{"request string id", `{"jsonrpc":"2.0","id":"1","method":"ping"}`, framing.KindRequest, framing.StringID("1"), "ping"},
		{"id zero", `{"jsonrpc":"2.0","id":0,"method":"ping"}`, framing.KindRequest, framing.IntID(0), "ping"},
		{"negative id", `{"id":-42,"method":"ping"}`, framing.KindRequest, framing.IntID(-42), "ping"},
		{"escaped string id", `{"id":"a\u0062c","method":"ping"}`, framing.KindRequest, framing.StringID("abc"), "ping"},
		{"unknown method", `{"id":7,"method":"future/thing"}`, framing.KindRequest, framing.IntID(7), "future/thing"},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, framing.KindNotification, framing.ID{}, "notifications/initialized"},
		{"result", `{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`, framing.KindResponse, framing.IntID(3), ""},
		{"error", `{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}}`, framing.KindResponse, framing.StringID("x"), ""},
		{"error null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}`, framing.KindResponse, framing.ID{}, ""},
		{"keys in any order", `{"params":{"a":[1,{"b":null}]},"method":"tools/call","id":9,"jsonrpc":"2.0"}`, framing.KindRequest, framing.IntID(9), "tools/call"},
		{"white space", " \t{ \"id\" : 5 , \"method\" : \"ping\" } ", framing.KindRequest, framing.IntID(5), "ping"},
		{"largest safe integer id", `{"id":9007199254740991,"method":"ping"}`, framing.KindRequest, framing.IntID(1<<53 - 1), "ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f framing.Frame
			if err := f.Parse([]byte(tt.in)); err != nil {
				t.Fatalf("Parse(%q) = %v", tt.in, err)
			}
			if f.Batch || len(f.Msgs) != 1 {
				t.Fatalf("Parse(%q): batch=%v msgs=%d, want one message", tt.in, f.Batch, len(f.Msgs))
			}
			m := f.Msgs[0]
			if m.Kind != tt.kind || m.Method != tt.method {
				t.Errorf("Parse(%q) = kind %v method %q, want %v %q", tt.in, m.Kind, m.Method, tt.kind, tt.method)
			}
			if tt.id.IsValid() && m.ID != tt.id {
				t.Errorf("Parse(%q).ID = %v, want %v", tt.in, m.ID, tt.id)
			}
			if m.IDSpan.Found() {
				if got := string(m.Raw[m.IDSpan.Start:m.IDSpan.End]); got != m.ID.String() && tt.id.IsValid() && tt.name != "escaped string id" {
					t.Errorf("IDSpan covers %q, want %q", got, m.ID.String())
				}
			}
		})
	}
}

func TestIDTypesDiffer(t *testing.T) {
	var a, b framing.Frame
	if err := a.Parse([]byte(`{"id":1,"method":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Parse([]byte(`{"id":"1","method":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if a.Msgs[0].ID == b.Msgs[0].ID {
		t.Errorf("ID 1 == ID \"1\"; they must differ")
	}
	m := map[framing.ID]int{a.Msgs[0].ID: 1, b.Msgs[0].ID: 2}
	if len(m) != 2 {
		t.Errorf("map has %d keys, want 2", len(m))
	}
}

func TestParseFields(t *testing.T) {
	in := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"abc","reason":"user"}}`
	var f framing.Frame
	if err := f.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	m := f.Msgs[0]
	if m.RequestID != framing.StringID("abc") || string(m.Raw[m.RequestIDSpan.Start:m.RequestIDSpan.End]) != `"abc"` {
		t.Errorf("RequestID = %v span %v", m.RequestID, m.RequestIDSpan)
	}

	in = `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":0},"task":{"ttl":100}}}`
	if err := f.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	m = f.Msgs[0]
	if m.Token != framing.IntID(0) || !m.HasTask {
		t.Errorf("Token = %v HasTask = %v, want 0 true", m.Token, m.HasTask)
	}

	in = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":2}}`
	if err := f.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if f.Msgs[0].Token != framing.StringID("t1") {
		t.Errorf("progress Token = %v, want \"t1\"", f.Msgs[0].Token)
	}

	in = `{"jsonrpc":"2.0","id":4,"result":{"task":{"taskId":"T-9","status":"working"}}}`
	if err := f.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if f.Msgs[0].TaskID != "T-9" {
		t.Errorf("TaskID = %q, want T-9", f.Msgs[0].TaskID)
	}

	// A cancel with no requestId (allowed for tasks in 2025-11-25) parses;
	// the id is simply absent.
	if err := f.Parse([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	if f.Msgs[0].RequestID.IsValid() {
		t.Errorf("RequestID = %v, want absent", f.Msgs[0].RequestID)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		invalid bool // want *InvalidError (else *SyntaxError)
	}{
		{"garbage", `hello`, false},
		{"truncated", `{"id":1,"method":"pi`, false},
		{"trailing", `{"id":1,"method":"ping"} x`, false},
		{"two objects", `{"id":1,"method":"ping"}{"id":2,"method":"ping"}`, false},
		{"bad escape", `{"id":"\x","method":"ping"}`, false},
		{"control char", "{\"id\":\"a\x01\",\"method\":\"ping\"}", false},
		{"bad number", `{"id":01,"method":"ping"}`, false},
		{"unclosed array", `{"id":1,"method":"ping","params":[1,2}`, false},
		{"null id request", `{"id":null,"method":"ping"}`, true},
		{"object id", `{"id":{},"method":"ping"}`, true},
		{"array id", `{"id":[1],"method":"ping"}`, true},
		{"bool id", `{"id":true,"method":"ping"}`, true},
		{"not an object", `"ping"`, true},
		{"number method", `{"id":1,"method":5}`, true},
		{"nothing", `{"jsonrpc":"2.0"}`, true},
		{"result without id", `{"result":{}}`, true},
		{"empty batch", `[]`, true},
		// Ids that servers' JSON libraries rewrite (issue 8, item 14).
		{"fraction id", `{"id":2.0,"method":"ping"}`, true},
		{"exponent id", `{"id":1e2,"method":"ping"}`, true},
		{"id beyond 2^53", `{"id":9007199254740992,"method":"ping"}`, true},
		{"huge id", `{"id":123456789012345678901234,"method":"ping"}`, true},
		{"id not UTF-8", "{\"id\":\"a\xffb\",\"method\":\"ping\"}", true},
		// Only one token could be renamed (issue 8, item 4).
		{"two progress tokens", `{"id":1,"method":"tools/call","params":{"progressToken":"victim","_meta":{"progressToken":"mine"}}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f framing.Frame
			err := f.Parse([]byte(tt.in))
			var se *framing.SyntaxError
			var ie *framing.InvalidError
			switch {
			case tt.invalid && !errors.As(err, &ie):
				t.Errorf("Parse(%q) = %v, want InvalidError", tt.in, err)
			case !tt.invalid && !errors.As(err, &se):
				t.Errorf("Parse(%q) = %v, want SyntaxError", tt.in, err)
			}
		})
	}
}

func TestParseDeepNesting(t *testing.T) {
	deep := make([]byte, 0, 40010)
	deep = append(deep, `{"id":1,"method":"x","params":`...)
	for range 20000 {
		deep = append(deep, '[')
	}
	var f framing.Frame
	if err := f.Parse(deep); err == nil {
		t.Fatal("Parse(20000 nested arrays) = nil, want an error")
	}
}

// TestParseNestingAcrossTheWord checks brackets of both kinds around the
// scanner's 64 levels kept in a word, deeper ones in a slice: every
// closer must match its opener at every depth, as encoding/json has it,
// with one Frame reused so that a deep frame's leftovers meet the next.
func TestParseNestingAcrossTheWord(t *testing.T) {
	var f framing.Frame
	for _, depth := range []int{1, 63, 64, 65, 66, 129, 200} {
		for _, pattern := range []string{"[", "{", "[{", "{[", "[[{"} {
			var open, closers []byte
			for i := range depth {
				switch pattern[i%len(pattern)] {
				case '[':
					open, closers = append(open, '['), append([]byte{']'}, closers...)
				default:
					open, closers = append(open, `{"k":`...), append([]byte{'}'}, closers...)
				}
			}
			wrap := func(inner, closers []byte) []byte {
				return slices.Concat([]byte(`{"jsonrpc":"2.0","id":1,"method":"x","params":{"v":`), inner, []byte(`1`), closers, []byte(`}}`))
			}
			good := wrap(open, closers)
			if err := f.Parse(good); err != nil || !json.Valid(good) {
				t.Fatalf("depth %d %q: Parse = %v, json.Valid = %v; want both to accept", depth, pattern, err, json.Valid(good))
			}
			for k := range closers { // each closer swapped for the other kind
				bad := slices.Clone(closers)
				bad[k] = map[byte]byte{']': '}', '}': ']'}[bad[k]]
				in := wrap(open, bad)
				if err := f.Parse(in); err == nil || json.Valid(in) {
					t.Fatalf("depth %d %q, closer %d swapped: Parse = %v, json.Valid = %v; want both to refuse", depth, pattern, k, err, json.Valid(in))
				}
			}
		}
	}
}

func TestParseBatch(t *testing.T) {
	in := `[{"jsonrpc":"2.0","id":1,"method":"tools/call"}, {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}},{"id":null,"method":"x"}]`
	var f framing.Frame
	if err := f.Parse([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if !f.Batch || len(f.Msgs) != 3 {
		t.Fatalf("Batch = %v, msgs = %d; want true, 3", f.Batch, len(f.Msgs))
	}
	if f.Msgs[1].Method != framing.MethodCancelled || f.Msgs[1].RequestID != framing.IntID(0) {
		t.Errorf("batch[1] = %q requestId %v", f.Msgs[1].Method, f.Msgs[1].RequestID)
	}
	if got := string(f.Msgs[1].Raw); got != `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}` {
		t.Errorf("batch[1].Raw = %q", got)
	}
	m := f.Msgs[1]
	if got := string(m.Raw[m.RequestIDSpan.Start:m.RequestIDSpan.End]); got != "0" {
		t.Errorf("batch[1] requestId span covers %q, want 0", got)
	}
	if f.Errs[0] != nil || f.Errs[2] == nil {
		t.Errorf("Errs = %v, want [nil nil error]", f.Errs)
	}
	if ie := (*framing.InvalidError)(nil); !errors.As(f.Errs[2], &ie) {
		t.Errorf("Errs[2] = %T, want an *InvalidError (-32600, not a parse error)", f.Errs[2])
	}
}

func TestSpliceAndErrors(t *testing.T) {
	raw := []byte(`{"jsonrpc":"2.0","id":"a","result":{}}`)
	var f framing.Frame
	if err := f.Parse(raw); err != nil {
		t.Fatal(err)
	}
	got := string(framing.Splice(nil, raw, f.Msgs[0].IDSpan, framing.IntID(12)))
	if want := `{"jsonrpc":"2.0","id":12,"result":{}}`; got != want {
		t.Errorf("Splice = %s, want %s", got, want)
	}
	e := framing.AppendErrorResponse(nil, framing.ID{}, framing.ErrorObject{Code: framing.CodeParseError, Message: "Parse error"})
	if err := f.Parse(e); err != nil || f.Msgs[0].Kind != framing.KindResponse || !f.Msgs[0].IsError {
		t.Errorf("AppendErrorResponse gave %s: %v", e, err)
	}
	if got := framing.StringID("q\"\n").String(); got != `"q\"\n"` {
		t.Errorf("StringID.String() = %s", got)
	}
}

func TestRewriteTwoEdits(t *testing.T) {
	raw := []byte(`{"params":{"_meta":{"progressToken":"t"}},"id":1,"method":"x"}`)
	var f framing.Frame
	if err := f.Parse(raw); err != nil {
		t.Fatal(err)
	}
	m := f.Msgs[0]
	// The id comes after the token here: the edits are applied in span order whatever their order.
	got := string(framing.Rewrite(nil, raw, framing.Edit{Span: m.IDSpan, To: framing.StringID("a")},
		framing.Edit{Span: m.TokenSpan, To: framing.IntID(9)}))
	if want := `{"params":{"_meta":{"progressToken":9}},"id":"a","method":"x"}`; got != want {
		t.Errorf("Rewrite = %s, want %s", got, want)
	}
}

func TestRevisionCancelsByClose(t *testing.T) {
	for r, want := range map[framing.Revision]bool{"": false, "2024-11-05": false, "2025-11-25": false,
		"2026-07-28": true, "2027-01-01": true} {
		if got := r.CancelsByClose(); got != want {
			t.Errorf("%q.CancelsByClose() = %v, want %v", r, got, want)
		}
	}
}

// TestAppendCancelled: the proxy's own cancel parses back as a cancel
// naming the same id, of either type, with its reason (quoted as JSON).
func TestAppendCancelled(t *testing.T) {
	for _, tc := range []struct {
		id     framing.ID
		reason string
		want   string
	}{
		{framing.IntID(7), "", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`},
		{framing.StringID("a\"b"), "user \"stop\"\n", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a\"b","reason":"user \"stop\"\n"}}`},
	} {
		got := framing.AppendCancelled(nil, tc.id, tc.reason)
		if string(got) != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
		var f framing.Frame
		if err := f.Parse(got); err != nil || f.Msgs[0].Method != framing.MethodCancelled || f.Msgs[0].RequestID != tc.id || f.Msgs[0].Reason != tc.reason {
			t.Errorf("%s parses back as %+v (%v)", got, f.Msgs, err)
		}
	}
}

// TestErrorIDOfARefusedRequest: a request refused for something other than
// its id (two progress tokens, a method that is no string) is answered
// under its own id, so that its sender is not left waiting; one whose id
// is the problem, under that id as written; one without an id, under null.
func TestErrorIDOfARefusedRequest(t *testing.T) {
	for _, c := range []struct{ frame, want string }{
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"progressToken":"a","_meta":{"progressToken":"b"}}}`, "5"},
		{`{"jsonrpc":"2.0","id":"x","method":7}`, `"x"`},
		{`{"jsonrpc":"2.0","id":2.0,"method":"ping"}`, "2.0"},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"a","_meta":{"progressToken":"b"}}}`, "null"},
	} {
		var f framing.Frame
		err := f.Parse([]byte(c.frame))
		if err == nil {
			t.Fatalf("%s: parsed", c.frame)
		}
		if got := string(framing.AppendErrorResponse(nil, framing.ErrorID(err), framing.ErrorObject{Code: framing.CodeInvalidRequest, Message: "x"})); !strings.Contains(got, `"id":`+c.want+`,`) {
			t.Errorf("%s: answered %s, want the id %s", c.frame, got, c.want)
		}
	}
	if f := new(framing.Frame); !errors.Is(f.Parse([]byte(`{"jsonrpc":"2.0","id":5,"method":"x","params":{"progressToken":"a","_meta":{"progressToken":"b"}}}`)), framing.ErrTwoTokens) {
		t.Error("the reason is no longer framing.ErrTwoTokens")
	}
}

// TestParseSubscriptionID: a notification's _meta names the
// subscriptions/listen request it belongs to, a string or a number, and
// where the value is, for the proxy to put the client's id back.
func TestParseSubscriptionID(t *testing.T) {
	for raw, want := range map[string]framing.ID{
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"s-1"}}}`:                              framing.StringID("s-1"),
		`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{},"_meta":{"x":1,"io.modelcontextprotocol/subscriptionId":7}}}`: framing.IntID(7),
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"subscriptionId":"s-1"}}`:                                                                {},
	} {
		var f framing.Frame
		if err := f.Parse([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		m := &f.Msgs[0]
		if m.SubscriptionID != want {
			t.Errorf("%s: SubscriptionID %v, want %v", raw, m.SubscriptionID, want)
		}
		if want.IsValid() && string(m.Raw[m.SubscriptionIDSpan.Start:m.SubscriptionIDSpan.End]) != string(want.AppendJSON(nil)) {
			t.Errorf("%s: span %v", raw, m.SubscriptionIDSpan)
		}
	}
}

// TestLastName: a name is interned for the whole process (two sessions'
// LastNames give the same string), costs no allocation once seen, and an
// escaped name is decoded.
func TestLastName(t *testing.T) {
	parse := func(name string) *framing.Message {
		var f framing.Frame
		if err := f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + name + `}}`)); err != nil {
			t.Fatal(err)
		}
		return &f.Msgs[0]
	}
	var a, b framing.LastName
	one, other := parse(`"slow_tool"`), parse(`"fast_tool"`)
	x, y := a.Of(one), b.Of(one)
	if x != "slow_tool" || unsafe.StringData(x) != unsafe.StringData(y) {
		t.Errorf("two LastNames gave %q at %p and %q at %p, want one string", x, unsafe.StringData(x), y, unsafe.StringData(y))
	}
	if n := testing.AllocsPerRun(100, func() { a.Of(one); a.Of(other) }); n != 0 {
		t.Errorf("names seen before cost %v allocations, want 0", n)
	}
	if got := a.Of(parse(`"tab\tbed"`)); got != "tab\tbed" {
		t.Errorf("an escaped name: %q", got)
	}
}
