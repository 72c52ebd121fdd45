package upstream

import (
	"io"
	"strings"
	"testing"
)

// TestIsEventStream: the media type in any case, with parameters and
// surrounding space; nothing else.
func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, " text/event-stream ": true,
		"application/json": false, "text/event": false, "": false, "text/event-streamx": false, "text/event-stream ;x=1": true,
	} {
		if got := IsEventStream([]byte(ct)); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestReadAll: a body is read to its end in one buffer of its declared
// length, or its first max+1 bytes when longer than max or of unknown
// length; a body shorter than declared is an error, with what came.
func TestReadAll(t *testing.T) {
	for _, tt := range []struct {
		body        string
		length, max int
		want        string
		err         error
	}{
		{"hello", 5, 10, "hello", nil},
		{"hello", 5, 5, "hello", nil},
		{"", 0, 10, "", nil},
		{"hello", -1, 10, "hello", nil}, // chunked
		{"hello", -1, 3, "hell", nil},   // chunked, over the limit
		{"hello", 5, 3, "hell", nil},    // declared over the limit
		{"hel", 5, 10, "hel", io.ErrUnexpectedEOF},
		{"hello!", 5, 10, "hello!", nil}, // more than declared: seen
	} {
		got, err := ReadAll(strings.NewReader(tt.body), tt.length, tt.max)
		if string(got) != tt.want || err != tt.err {
			t.Errorf("ReadAll(%q, length %d, max %d) = %q, %v; want %q, %v", tt.body, tt.length, tt.max, got, err, tt.want, tt.err)
		}
	}
}
