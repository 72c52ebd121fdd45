// Package mcpheader is the 2026-07-28 Streamable HTTP transport's request
// metadata headers (its "Request Metadata" section, from SEP-2243): the
// values a client mirrors from a request's body into Mcp-Name and
// Mcp-Param-{Name}, in plain text where that is safe and in the Base64
// sentinel form (=?base64?...?=) where it is not, and the check a server
// makes that a header agrees with the body.
package mcpheader

import (
	"encoding/base64"
	"errors"
	"strings"
	"unicode/utf8"
)

// The sentinel form's markers, exactly so (lowercase).
const (
	sentinelPrefix = "=?base64?"
	sentinelSuffix = "?="
)

// Encode returns v as a header value: as it is when it is plain ASCII text
// without leading or trailing white space, else in the Base64 sentinel form.
// A value that merely looks like the sentinel form is encoded too, so that
// it is not taken for one; white space inside a value stays plain.
func Encode(v string) string {
	if plain(v) {
		return v
	}
	return sentinelPrefix + base64.StdEncoding.EncodeToString([]byte(v)) + sentinelSuffix
}

// plain reports whether v goes as it is: visible ASCII and inner spaces only
// (no control character, tab included, and no leading or trailing space),
// and not in the shape of the sentinel form.
func plain(v string) bool {
	if v == "" {
		return true
	}
	if v[0] == ' ' || v[len(v)-1] == ' ' || sentinel(v) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// sentinel reports whether v has the sentinel form's shape.
func sentinel(v string) bool {
	return len(v) >= len(sentinelPrefix)+len(sentinelSuffix) &&
		strings.HasPrefix(v, sentinelPrefix) && strings.HasSuffix(v, sentinelSuffix)
}

// ErrInvalid is the error of a header value that is neither valid header
// text nor a valid sentinel form.
var ErrInvalid = errors.New("not a valid header value")

// Decode returns the value a header carries: a sentinel form's decoded
// text (valid UTF-8), or the plain value, which may hold only visible
// ASCII, spaces and tabs (RFC 9110's field value), as it is.
func Decode(h string) (string, error) {
	if sentinel(h) {
		b, err := base64.StdEncoding.DecodeString(h[len(sentinelPrefix) : len(h)-len(sentinelSuffix)])
		if err != nil || !utf8.Valid(b) {
			return "", ErrInvalid
		}
		return string(b), nil
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return "", ErrInvalid
		}
	}
	return h, nil
}
