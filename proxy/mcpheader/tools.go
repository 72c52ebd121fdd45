package mcpheader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Tools is what a client learned of its server's tools' mirrored
// parameters from the tools/list answers it read; safe for concurrent use.
type Tools struct {
	mu     sync.Mutex
	params map[string][]Param // by tool name; a tool without annotations has none
	read   bool               // a tools/list answer was read since the last Forget
	warned map[string]bool    // the tools whose rejection was reported (Unwarned)
	// reading is held while a client reads tools/list itself (ReadOnce,
	// Reread): one read at a time, the others wait for it.
	reading sync.Mutex
}

// ReadOnce runs read, which reads tools/list into t, unless an answer was
// read since the last Forget; callers of the same moment wait for one
// read instead of making their own.
func (t *Tools) ReadOnce(read func()) {
	if t.Read() {
		return
	}
	t.reading.Lock()
	defer t.reading.Unlock()
	if !t.Read() {
		read()
	}
}

// Reread runs read, which reads tools/list into t afresh (what was read is
// stale), one read at a time.
func (t *Tools) Reread(read func()) {
	t.reading.Lock()
	defer t.reading.Unlock()
	read()
}

// Forget forgets every tool: what it read is stale (the server's list
// changed, or it refused a call's headers).
func (t *Tools) Forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.params)
	t.read = false
}

// MarkRead notes that a client's own read of tools/list was made, whatever
// it found: a read that failed is not made again before each call (a
// HeaderMismatch answer makes it stale, Forget).
func (t *Tools) MarkRead() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.read = true
}

// Read reports whether a tools/list answer was read since the last Forget
// (or ever): with none, a client reads tools/list before a call.
func (t *Tools) Read() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.read
}

// Rejected is a tool left out of a tools/list answer: its x-mcp-header
// annotations are invalid (Why).
type Rejected struct {
	Tool string
	Why  error
}

// Unwarned returns the rejections of rs not returned before: a tool left
// out is reported once, however often its list is read.
func (t *Tools) Unwarned(rs []Rejected) []Rejected {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.warned == nil {
		t.warned = map[string]bool{}
	}
	var fresh []Rejected
	for _, r := range rs {
		if !t.warned[r.Tool] {
			t.warned[r.Tool] = true
			fresh = append(fresh, r)
		}
	}
	return fresh
}

// Learn reads a tools/list answer (a JSON-RPC response): it remembers each
// tool's mirrored parameters, and returns the answer without the tools
// whose annotations are invalid, which a client must leave out, or nil if
// it keeps every tool; and the tools it left out.
func (t *Tools) Learn(answer []byte) (kept []byte, rejected []Rejected) {
	if !bytes.Contains(answer, []byte(`"tools"`)) {
		return nil, nil
	}
	var resp map[string]json.RawMessage
	var result map[string]json.RawMessage
	var tools []json.RawMessage
	if json.Unmarshal(answer, &resp) != nil || json.Unmarshal(resp["result"], &result) != nil ||
		json.Unmarshal(result["tools"], &tools) != nil {
		return nil, nil
	}
	valid := tools[:0:0]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.params == nil {
		t.params = map[string][]Param{}
	}
	t.read = true
	for _, raw := range tools {
		var tool struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		}
		json.Unmarshal(raw, &tool)
		ps, err := Params(tool.InputSchema)
		if err != nil {
			rejected = append(rejected, Rejected{Tool: tool.Name, Why: err})
			delete(t.params, tool.Name)
			continue
		}
		t.params[tool.Name] = ps
		valid = append(valid, raw)
	}
	if len(rejected) == 0 {
		return nil, nil
	}
	result["tools"], _ = json.Marshal(valid)
	resp["result"], _ = json.Marshal(result)
	kept, _ = json.Marshal(resp)
	return kept, rejected
}

// Mirror sets, through set, the Mcp-Param headers of a tools/call of the
// tool name whose params object is params; it reports whether it knows the
// tool (a tool the answers it read did not list may have annotations it
// has not seen).
func (t *Tools) Mirror(name string, params []byte, set func(header, value string)) (known bool) {
	t.mu.Lock()
	ps, known := t.params[name]
	t.mu.Unlock()
	if len(ps) == 0 {
		return known
	}
	args := arguments(params)
	for _, param := range ps {
		if v, ok := param.Value(args); ok {
			set(param.Name(), v)
		}
	}
	return true
}

// Check returns why the Mcp-Param-* headers of a 2026-07-28 tools/call of
// the tool name (whose params object is params) disagree with its
// arguments, or nil; header returns a header's value, nil if absent. A
// header must come for every annotated argument given (not null), and for
// no other; a tool the answers it read did not list is not checked.
func (t *Tools) Check(name string, params []byte, header func(name string) []byte) error {
	t.mu.Lock()
	ps := t.params[name]
	t.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	args := arguments(params)
	for _, param := range ps {
		h := bytes.Trim(header(param.Name()), " \t")
		v := param.argument(args)
		switch {
		case v == nil && len(h) > 0:
			return fmt.Errorf("%s header for the absent or null parameter %q", param.Name(), strings.Join(param.Path, "."))
		case v == nil:
			continue
		case len(h) == 0:
			return fmt.Errorf("the %s header is missing for parameter %q", param.Name(), strings.Join(param.Path, "."))
		}
		decoded, err := Decode(string(h))
		if err != nil {
			return fmt.Errorf("%s header value %q is %w", param.Name(), h, err)
		}
		if !agrees(decoded, v) {
			return fmt.Errorf("%s header value %q does not match the body's parameter %q", param.Name(), decoded, strings.Join(param.Path, "."))
		}
	}
	return nil
}

// arguments returns a tools/call params object's arguments, decoded, its
// numbers as json.Number; nil if they are no object.
func arguments(params []byte) map[string]any {
	var p struct {
		Arguments map[string]any `json:"arguments"`
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	dec.Decode(&p)
	return p.Arguments
}
