package framing_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

func TestLineSplitter(t *testing.T) {
	var l framing.LineSplitter
	var got []string
	send := func(line []byte) bool { got = append(got, string(line)); return len(got) < 4 }
	l.Split([]byte("a\nb"), send)
	l.Split([]byte("c\n\n \r\nd"), send)
	l.Split([]byte("\ne\nf\n"), send)
	if want := []string{"a", "bc", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q (blank lines skipped, stopped when send said so)", got, want)
	}
}

// FuzzLineSplitter: however a stream of bytes is cut into writes, the lines
// handed on are the stream's non-blank lines, in order.
func FuzzLineSplitter(f *testing.F) {
	f.Add([]byte("a\nb\n\n c\n"), uint8(1))
	f.Add([]byte("{\"x\":1}\r\n{\"y\":2}"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		var want []string
		whole := data
		for {
			i := bytes.IndexByte(whole, '\n')
			if i < 0 {
				break
			}
			if line := whole[:i]; len(bytes.TrimSpace(line)) > 0 {
				want = append(want, string(line))
			}
			whole = whole[i+1:]
		}
		var l framing.LineSplitter
		var got []string
		step := int(cut%16) + 1
		for p := data; len(p) > 0; {
			n := min(step, len(p))
			l.Split(p[:n], func(line []byte) bool { got = append(got, string(line)); return true })
			p = p[n:]
		}
		if !slices.Equal(got, want) {
			t.Errorf("writes of %d bytes gave %q, want %q", step, got, want)
		}
	})
}
