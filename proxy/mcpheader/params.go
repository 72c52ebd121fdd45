package mcpheader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Param is a tool parameter its server marks (x-mcp-header in the tool's
// inputSchema) to be mirrored into the header Mcp-Param-{Header}.
type Param struct {
	Header string   // the annotation: the header's name after Mcp-Param-
	Path   []string // the properties keys that lead to it from the schema's root
}

// Name returns the parameter's header name.
func (p Param) Name() string { return "Mcp-Param-" + p.Header }

// notSchemas are the keywords whose values are data, not schemas: an
// x-mcp-header key inside them annotates nothing.
var notSchemas = []string{"const", "enum", "default", "examples", "required"}

// Params returns the parameters a tool's inputSchema marks with
// x-mcp-header, in no set order, or why its annotations make the tool
// invalid (the spec's constraints: a non-empty token, case-insensitively
// unique, on a string, integer or boolean property reached from the root
// through properties keys alone).
func Params(inputSchema []byte) ([]Param, error) {
	if !bytes.Contains(inputSchema, []byte("x-mcp-header")) {
		return nil, nil
	}
	var root any
	if err := json.Unmarshal(inputSchema, &root); err != nil {
		return nil, err
	}
	var ps []Param
	if err := walk(root, nil, true, &ps); err != nil {
		return nil, err
	}
	for i, p := range ps {
		if slices.ContainsFunc(ps[:i], func(q Param) bool { return strings.EqualFold(q.Header, p.Header) }) {
			return nil, fmt.Errorf("x-mcp-header %q is given twice", p.Header)
		}
	}
	return ps, nil
}

// walk collects the annotations under node, a schema at path; reachable
// says whether path is a chain of properties keys from the root.
func walk(node any, path []string, reachable bool, ps *[]Param) error {
	switch n := node.(type) {
	case []any:
		for _, v := range n {
			if err := walk(v, path, false, ps); err != nil {
				return err
			}
		}
	case map[string]any:
		if h, ok := n["x-mcp-header"]; ok {
			p, err := annotation(n, h, path, reachable)
			if err != nil {
				return err
			}
			*ps = append(*ps, p)
		}
		for k, v := range n {
			if slices.Contains(notSchemas, k) {
				continue
			}
			props, isProps := v.(map[string]any)
			if k != "properties" || !isProps {
				if err := walk(v, path, false, ps); err != nil {
					return err
				}
				continue
			}
			for name, sub := range props {
				if err := walk(sub, append(slices.Clip(path), name), reachable, ps); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// annotation checks the x-mcp-header h of the property schema n at path.
func annotation(n map[string]any, h any, path []string, reachable bool) (Param, error) {
	name, _ := h.(string)
	switch {
	case !reachable || len(path) == 0:
		return Param{}, fmt.Errorf("x-mcp-header %v is not on a property reached through properties alone", h)
	case !token(name):
		return Param{}, fmt.Errorf("x-mcp-header %q is not a header name token", h)
	}
	switch n["type"] {
	case "string", "integer", "boolean":
		return Param{Header: name, Path: path}, nil
	}
	return Param{}, fmt.Errorf("x-mcp-header %q is on a property of type %v, not string, integer or boolean", name, n["type"])
}

// token reports whether s is an HTTP field name (RFC 9110's 1*tchar).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Value returns p's header value in a call's arguments (decoded JSON, its
// numbers as json.Number), encoded; false when the arguments have none
// there (absent, null, or not a string, an integer in JavaScript's safe
// range, or a boolean).
func (p Param) Value(arguments map[string]any) (string, bool) {
	switch v := p.argument(arguments).(type) {
	case string:
		return Encode(v), true
	case bool:
		return strconv.FormatBool(v), true
	case json.Number:
		f, err := v.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53-1 {
			return "", false
		}
		return strconv.FormatInt(int64(f), 10), true
	}
	return "", false
}

// argument returns the value at p's path in arguments, nil if none.
func (p Param) argument(arguments map[string]any) any {
	var v any = arguments
	for _, k := range p.Path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[k]
	}
	return v
}

// agrees reports whether a header's decoded value agrees with the argument
// v: the same text, the same boolean, or the same integer (compared as a
// number: 42.0 is 42).
func agrees(decoded string, v any) bool {
	switch v := v.(type) {
	case string:
		return decoded == v
	case bool:
		return decoded == strconv.FormatBool(v)
	case json.Number:
		h, err := strconv.ParseFloat(decoded, 64)
		b, err2 := v.Float64()
		return err == nil && err2 == nil && h == b && h == math.Trunc(h) && math.Abs(h) <= 1<<53-1
	}
	return false
}
