package framing

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

type idKind uint8

const (
	idNone   idKind = iota // no id: the zero ID
	idInt                  // an integer that fits int64
	idNumber               // any other JSON number, kept as its literal text
	idString               // a JSON string, kept decoded
)

// ID is a JSON-RPC request id: a string or a number. It is comparable, so it
// works as a map key, and it keeps the JSON type: the number 1 and the string
// "1" are different IDs. The zero ID means "no id".
type ID struct {
	kind idKind
	num  int64
	str  string
}

// IntID returns the integer ID n.
func IntID(n int64) ID { return ID{kind: idInt, num: n} }

// StringID returns the string ID s.
func StringID(s string) ID { return ID{kind: idString, str: s} }

// IsValid reports whether id holds a string or a number.
func (id ID) IsValid() bool { return id.kind != idNone }

// String renders id as it would appear in JSON: 7 or "abc".
func (id ID) String() string {
	if !id.IsValid() {
		return "null"
	}
	return string(id.AppendJSON(nil))
}

// AppendJSON appends the JSON encoding of id to dst. The zero ID encodes as null.
func (id ID) AppendJSON(dst []byte) []byte {
	switch id.kind {
	case idInt:
		return strconv.AppendInt(dst, id.num, 10)
	case idNumber:
		return append(dst, id.str...)
	case idString:
		return appendJSONString(dst, id.str)
	}
	return append(dst, "null"...)
}

// MarshalJSON implements json.Marshaler.
func (id ID) MarshalJSON() ([]byte, error) { return id.AppendJSON(nil), nil }

// appendJSONString quotes s as a JSON string. Plain ASCII takes the fast path.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ := json.Marshal(s) // cannot fail for a string
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// maxSafeInt is the largest integer every JSON library keeps exact
// (JavaScript's Number.MAX_SAFE_INTEGER).
const maxSafeInt = 1<<53 - 1

// portable reports whether every JSON library echoes id as it came: a
// string of valid UTF-8, or an integer within ±maxSafeInt.
func (id ID) portable() bool {
	switch id.kind {
	case idInt:
		return id.num >= -maxSafeInt && id.num <= maxSafeInt
	case idString:
		return utf8.ValidString(id.str)
	}
	return false
}

// parseID turns the JSON value raw (already validated) into an ID. It reports
// false for null, objects, arrays and booleans, which are not valid ids.
func parseID(raw []byte) (ID, bool) {
	if len(raw) == 0 {
		return ID{}, false
	}
	switch c := raw[0]; {
	case c == '"':
		s, ok := unquote(raw)
		return ID{kind: idString, str: s}, ok
	case c == '-' || (c >= '0' && c <= '9'):
		if n, ok := parseInt(raw); ok {
			return ID{kind: idInt, num: n}, true
		}
		return ID{kind: idNumber, str: string(raw)}, true
	}
	return ID{}, false
}

// unquote decodes a validated JSON string literal.
func unquote(raw []byte) (string, bool) {
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			err := json.Unmarshal(raw, &s)
			return s, err == nil
		}
	}
	return string(inner), true
}

// parseInt parses a plain decimal integer that fits int64, without allocating.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || (len(b) > 1 && b[0] == '0') {
		return 0, false // 18 digits always fit; longer ones take the literal path
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
