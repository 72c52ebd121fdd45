package framing

import (
	"encoding/json"
	"strconv"
	"strings"
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

// HasPrefix reports whether id is a string that begins with prefix.
func (id ID) HasPrefix(prefix string) bool {
	return id.kind == idString && strings.HasPrefix(id.str, prefix)
}

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

// unquote decodes a validated JSON string literal. A literal with an
// escaped lone surrogate ("\ud800"), which encoding/json would decode as
// U+FFFD (and so as the same id as "\ufffd"), decodes to a string that is
// not valid UTF-8 (its literal, marked), which no id may be: it is refused
// as invalid UTF-8 is.
func unquote(raw []byte) (string, bool) {
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			if loneSurrogate(inner) {
				return string(inner) + "\xff", true
			}
			var s string
			err := json.Unmarshal(raw, &s)
			return s, err == nil
		}
	}
	return string(inner), true
}

// LoneSurrogate reports whether JSON text (a string literal's content, or
// a whole value: escapes occur in strings only) escapes a UTF-16
// surrogate that is not half of a pair, which encoding/json decodes as
// U+FFFD, as it decodes "\ufffd".
func LoneSurrogate(text []byte) bool { return loneSurrogate(text) }

// loneSurrogate reports whether a JSON string literal's content escapes a
// UTF-16 surrogate that is not half of a pair.
func loneSurrogate(inner []byte) bool {
	for i := 0; i < len(inner); i++ {
		if inner[i] != '\\' {
			continue
		}
		i++
		if i >= len(inner) || inner[i] != 'u' {
			continue
		}
		r := hex4(inner[i+1:])
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low half first
		case r >= 0xD800 && r <= 0xDBFF:
			next := inner[i+5:]
			if len(next) < 6 || next[0] != '\\' || next[1] != 'u' {
				return true
			}
			if lo := hex4(next[2:]); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 10 // the pair
		default:
			i += 4
		}
	}
	return false
}

// hex4 decodes four hex digits (validated JSON), or -1.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
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
