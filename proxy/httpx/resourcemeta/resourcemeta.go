// Package resourcemeta rewrites what names an OAuth-protected MCP server's
// own URL (MCP authorization, RFC 9728) for a relay in front of it: the
// resource of its protected resource metadata, and the resource_metadata
// parameter of its WWW-Authenticate challenges, so that a client that
// reaches the server through the relay checks, and discovers, the
// relay's URL.
package resourcemeta

import (
	"bytes"
	"encoding/json"
	"strings"
)

// WellKnown is where a resource's protected resource metadata is: the
// resource's path follows it (RFC 9728 §3.1).
const WellKnown = "/.well-known/oauth-protected-resource"

const param = "resource_metadata"

// Challenge returns the WWW-Authenticate value v with its
// resource_metadata parameter set to to, when ours says the URL it holds
// is one the relay serves in its place; otherwise v unchanged. A value
// with no such parameter is returned as it is.
func Challenge(v []byte, ours func(url string) bool, to string) []byte {
	for i := 0; i < len(v); {
		j := indexFold(v[i:], param)
		if j < 0 {
			return v
		}
		start, k := i+j, skipSpace(v, i+j+len(param))
		i = start + len(param)
		if start > 0 && !isSep(v[start-1]) || k >= len(v) || v[k] != '=' {
			continue // another word that contains it, or no value
		}
		vs := skipSpace(v, k+1)
		ve := valueEnd(v, vs)
		if !ours(unquote(v[vs:ve])) {
			return v
		}
		out := make([]byte, 0, len(v)+len(to))
		out = append(out, v[:start]...)
		out = append(out, param+"="...)
		out = appendQuoted(out, to)
		return append(out, v[ve:]...)
	}
	return v
}

// Document returns the protected resource metadata body with its
// resource set to to, when it names from (the server's own endpoint,
// trailing slash or not); ok is false, and body is returned, when body is
// not a JSON object or names another resource.
func Document(body []byte, from, to string) (out []byte, ok bool) {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil || doc == nil {
		return body, false
	}
	var res string
	if json.Unmarshal(doc["resource"], &res) != nil || strings.TrimSuffix(res, "/") != strings.TrimSuffix(from, "/") {
		return body, false
	}
	doc["resource"], _ = json.Marshal(to)
	out, err := json.Marshal(doc)
	if err != nil {
		return body, false
	}
	return out, true
}

func isSep(c byte) bool { return c == ' ' || c == '\t' || c == ',' }

func skipSpace(v []byte, k int) int {
	for k < len(v) && (v[k] == ' ' || v[k] == '\t') {
		k++
	}
	return k
}

// valueEnd returns where the parameter value that starts at k ends: a
// quoted-string (with its escapes) or a token.
func valueEnd(v []byte, k int) int {
	if k < len(v) && v[k] == '"' {
		for k++; k < len(v); k++ {
			switch v[k] {
			case '\\':
				k++
			case '"':
				return k + 1
			}
		}
		return len(v)
	}
	for k < len(v) && !isSep(v[k]) {
		k++
	}
	return k
}

// appendQuoted appends s as a quoted-string.
func appendQuoted(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return append(out, '"')
}

// unquote returns a parameter value without its quotes and escapes.
func unquote(v []byte) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return string(v)
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		if v[i] == '\\' && i+1 < len(v)-1 {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// indexFold is bytes.Index of the lowercase ASCII word w, case folded.
func indexFold(v []byte, w string) int {
	for i := 0; i+len(w) <= len(v); i++ {
		if bytes.EqualFold(v[i:i+len(w)], []byte(w)) {
			return i
		}
	}
	return -1
}
