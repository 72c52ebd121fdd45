package framing_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// readAll reads every frame and error until io.EOF, rendering errors as
// "ERR:<size>" for FrameTooLargeError.
func readAll(t testing.TB, r *framing.Reader) []string {
	var out []string
	var buf []byte
	for {
		f, err := r.Read(buf)
		var tl *framing.FrameTooLargeError
		switch {
		case err == io.EOF:
			return out
		case errors.As(err, &tl):
			out = append(out, "ERR:"+strings.Repeat("x", int(tl.Size)))
		case err != nil:
			t.Fatalf("Read: %v", err)
		default:
			out = append(out, string(f))
			buf = f
		}
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want []string
	}{
		{"lines", "a\nb\n", 10, []string{"a", "b"}},
		{"crlf", "a\r\nb\r\n", 10, []string{"a", "b"}},
		{"blank lines skipped", "\n\n  \na\n\n", 10, []string{"a"}},
		{"last line without newline", "a\nb", 10, []string{"a", "b"}},
		{"exactly max", "12345\n", 5, []string{"12345"}},
		{"too large then resync", "123456\nok\n", 5, []string{"ERR:xxxxxx", "ok"}},
		{"too large at eof", "1234567", 5, []string{"ERR:xxxxxxx"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAll(t, framing.NewReader(strings.NewReader(tt.in), tt.max))
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("frames = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReaderLargeFrames crosses the 64 KiB internal buffer many times and
// skips an over-long line of several buffers without losing its neighbours.
func TestReaderLargeFrames(t *testing.T) {
	big := strings.Repeat("b", 300<<10)
	huge := strings.Repeat("h", 900<<10)
	in := "first\n" + big + "\n" + huge + "\nlast\n"
	got := readAll(t, framing.NewReader(strings.NewReader(in), 512<<10))
	if len(got) != 4 || got[0] != "first" || got[1] != big || got[2] != "ERR:"+strings.Repeat("x", len(huge)) || got[3] != "last" {
		t.Errorf("got %d frames; want first, big, error, last", len(got))
	}
}

// TestReaderReady: Ready is true only when a whole non-blank line is
// buffered, so that a frame followed by blank lines, white space or part of
// the next frame is never held back by a relay that flushes on !Ready.
func TestReaderReady(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"a\n", false},
		{"a\n\n", false},
		{"a\n\r\n  \t\n", false},
		{"a\n\n{\"part", false},
		{"a\r\n\r\n", false},
		{"a\nb\n", true},
		{"a\n\n\nb\n", true},
	}
	for _, tt := range tests {
		rd := framing.NewReader(strings.NewReader(tt.in), 0)
		if f, err := rd.Read(nil); err != nil || string(f) != "a" {
			t.Fatalf("%q: first frame %q, %v", tt.in, f, err)
		}
		if got := rd.Ready(); got != tt.want {
			t.Errorf("%q: Ready() = %v, want %v", tt.in, got, tt.want)
		}
	}
}
