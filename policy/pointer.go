package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// pointer is a parsed JSON pointer (RFC 6901): its reference tokens.
type pointer []string

// parsePointer parses "/a/b~1c/0". The empty string points at the whole
// document.
func parsePointer(s string) (pointer, error) {
	if s == "" {
		return pointer{}, nil
	}
	if s[0] != '/' {
		return nil, fmt.Errorf("%q is not a JSON pointer: it must start with /", s)
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return nil, fmt.Errorf("%q is not a JSON pointer: ~ must be followed by 0 or 1", s)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// eval returns the JSON value p points at in doc, and whether there is one.
func (p pointer) eval(doc []byte) (json.RawMessage, bool) {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return nil, false
	}
	return p.evalValue(v)
}

// evalValue is eval on a decoded document.
func (p pointer) evalValue(v any) (json.RawMessage, bool) {
	for _, tok := range p {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// String renders the pointer back.
func (p pointer) String() string {
	var b strings.Builder
	for _, tok := range p {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	return b.String()
}
