package mcpheader

import (
	"errors"
	"testing"
	"unicode/utf8"
)

// TestEncodeSpecExamples: the spec's encoding examples, and the cases the
// conformance suite checks (white space inside a value stays plain).
func TestEncodeSpecExamples(t *testing.T) {
	for v, want := range map[string]string{
		"us-west1":                           "us-west1",
		"Hello, 世界":                          "=?base64?SGVsbG8sIOS4lueVjA==?=",
		" padded ":                           "=?base64?IHBhZGRlZCA=?=",
		"line1\nline2":                       "=?base64?bGluZTEKbGluZTI=?=",
		"=?base64?literal?=":                 "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=",
		"internal space val":                 "internal space val",
		"tab\there":                          "=?base64?dGFiCWhlcmU=?=",
		"trailing\t":                         "=?base64?dHJhaWxpbmcJ?=",
		"":                                   "",
		"=?base64?":                          "=?base64?",
		"get_weather":                        "get_weather",
		"file:///projects/myapp/config.json": "file:///projects/myapp/config.json",
	} {
		if got := Encode(v); got != want {
			t.Errorf("Encode(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestDecode: the sentinel form decoded, plain values as they are, and what
// is neither refused.
func TestDecode(t *testing.T) {
	for h, want := range map[string]string{
		"us-west1":                            "us-west1",
		"=?base64?SGVsbG8sIOS4lueVjA==?=":     "Hello, 世界",
		"=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=": "=?base64?literal?=",
		"a\tb c":                              "a\tb c",
	} {
		if got, err := Decode(h); err != nil || got != want {
			t.Errorf("Decode(%q) = %q, %v; want %q", h, got, err, want)
		}
	}
	for _, h := range []string{"=?base64?!!!?=", "=?base64?/w==?=", "caf\xc3\xa9", "a\nb", "\x00"} {
		if got, err := Decode(h); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%q) = %q, %v; want ErrInvalid", h, got, err)
		}
	}
}

// FuzzEncodeDecode: every value a client may mirror (valid UTF-8) comes
// back from its header as it was, and the header is always valid header
// text.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"us-west1", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?=", "", "a b", "\t", "=?base64??="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := Encode(v)
		for i := 0; i < len(h); i++ {
			if c := h[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("Encode(%q) = %q: byte %#x is not header text", v, h, c)
			}
		}
		got, err := Decode(h)
		if !utf8.ValidString(v) {
			return // a client's JSON string is valid UTF-8; others need not come back
		}
		if err != nil || got != v {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", v, got, err)
		}
	})
}

// FuzzDecode: any header decodes or is refused, never more.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"us-west1", "=?base64?SGVsbG8sIOS4lueVjA==?=", "=?base64?!!?=", "a\tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		v, err := Decode(h)
		if err == nil && !utf8.ValidString(v) {
			t.Fatalf("Decode(%q) = %q: not UTF-8", h, v)
		}
	})
}
