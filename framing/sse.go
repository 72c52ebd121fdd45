package framing

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
)

// Event is one server-sent event (https://html.spec.whatwg.org/multipage/server-sent-events.html),
// the framing of JSON-RPC messages on a Streamable HTTP response. Its
// slices alias the reader's buffers and are valid until the next call to
// Next.
type Event struct {
	// Raw is the event exactly as read: its lines, comments included, and
	// the blank line that ended it (absent only at the end of the stream).
	// Relaying Raw relays the event unchanged.
	Raw []byte
	// Data is the event's data lines joined with "\n"; HasData reports
	// whether there was any data field.
	Data    []byte
	HasData bool
	// ID is the last id field's value, if HasID.
	ID    []byte
	HasID bool
	// Type is the event field's value, empty for the default "message".
	Type []byte
	// Retry is the retry field in milliseconds, if HasRetry.
	Retry    int
	HasRetry bool
	// Cut marks a last event that the stream ended without its blank line:
	// a browser or an SDK would drop it.
	Cut bool
}

// ErrEventTooLarge reports an event over the reader's limit; the reader has
// skipped the rest of it.
var ErrEventTooLarge = errors.New("server-sent event exceeds the size limit")

// EventTooLargeError is ErrEventTooLarge with the start of the skipped
// event's data (4 KiB at most), so that the reader's caller can tell whose
// answer it was (PeekID) and answer for it.
type EventTooLargeError struct {
	Head []byte // the start of its data, kept so that its id can be read
	Size int64  // the event's length in bytes, its field names included
}

func (e *EventTooLargeError) Error() string { return ErrEventTooLarge.Error() }
func (e *EventTooLargeError) Unwrap() error { return ErrEventTooLarge }

// ErrBudgetSpent reports an event that the reader could not hold because
// the Budget it shares with other readers was spent. The stream is left in
// the middle of the event: the caller ends it.
var ErrBudgetSpent = errors.New("the memory budget for server-sent events is spent")

// budgetFree is how much of an event a reader holds without asking its
// Budget: events up to this size cost the budget nothing.
const budgetFree = 64 << 10

// A Budget bounds the memory that SSE readers sharing it hold for large
// events: each reader asks it for twice (the event's bytes, and its data)
// what an event holds beyond budgetFree, and gives it back when the next
// event starts. It is safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a Budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Used returns how many bytes readers hold of the budget.
func (b *Budget) Used() int64 { return b.used.Load() }

func (b *Budget) reserve(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

// SSEReader reads server-sent events. It is not safe for concurrent use.
type SSEReader struct {
	br       *bufio.Reader
	max      int
	started  bool
	ev       Event
	raw      []byte
	data     []byte
	overflow bool
	size     int64 // the event's bytes so far
	// pendingCR is set when the last line ended with a "\r": a "\n"
	// right after it belongs to the same line end.
	pendingCR bool
	budget    *Budget // if set, large events are held against it
	reserved  int64   // what this reader holds of the budget
}

// SetBudget makes the reader hold events larger than 64 KiB against b.
func (r *SSEReader) SetBudget(b *Budget) { r.budget = b }

// fits reports whether the event may grow to n bytes, asking the budget
// for what it holds beyond budgetFree.
func (r *SSEReader) fits(n int) bool {
	if n > r.max {
		return false
	}
	need := 2 * int64(n-budgetFree)
	if r.budget == nil || need <= r.reserved {
		return true
	}
	if !r.budget.reserve(need - r.reserved) {
		return false
	}
	r.reserved = need
	return true
}

// Release gives the budget back what the reader holds of it, and the large
// buffers with it. Next does so for the last event; call Release when done
// with a reader that has a budget.
func (r *SSEReader) Release() {
	if r.reserved > 0 {
		r.budget.used.Add(-r.reserved)
		r.reserved = 0
		r.raw, r.data = nil, nil
	}
}

// NewSSEReader returns a reader of the event stream r that refuses events
// longer than max bytes (DefaultMaxFrameSize if max <= 0).
func NewSSEReader(r io.Reader, max int) *SSEReader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	return &SSEReader{br: bufio.NewReaderSize(r, 1<<10), max: max} // small: a sidecar holds one per open stream; longer lines are appended
}

var bom = []byte("\xef\xbb\xbf")

// Next returns the next event. At the end of the stream it returns io.EOF,
// after any last event that the stream ended without a blank line. An event
// over the limit yields ErrEventTooLarge once it has been skipped. Lines end
// in "\r\n", "\n" or a lone "\r", as the WHATWG's rules say: a reader that
// missed the lone "\r" would see other events than a browser or an SDK.
func (r *SSEReader) Next() (*Event, error) {
	r.Release()
	r.ev = Event{}
	r.raw, r.data, r.overflow, r.size = r.raw[:0], r.data[:0], false, 0
	atLineStart := true
	for {
		buf, err := r.br.Peek(1)
		if len(buf) == 0 {
			if err == io.EOF {
				return r.finish(io.EOF)
			}
			return nil, err
		}
		if !r.started {
			r.started = true
			if buf[0] == bom[0] {
				if b, _ := r.br.Peek(len(bom)); bytes.Equal(b, bom) {
					r.br.Discard(len(bom))
					continue
				}
			}
		}
		buf, _ = r.br.Peek(r.br.Buffered())
		n, end := r.scan(buf, &atLineStart)
		r.size += int64(n)
		switch {
		case r.overflow:
		case r.fits(len(r.raw) + n):
			r.raw = append(r.raw, buf[:n]...)
		case len(r.raw)+n <= r.max: // within the limit, but the budget is spent
			r.Release()
			return nil, ErrBudgetSpent
		default:
			// Over the limit: the rest is skipped, but the event's start
			// is kept (as much as a FrameTooLargeError keeps of a line), so that its id can still be read.
			if keep := min(n, headSize-len(r.raw)); keep > 0 {
				r.raw = append(r.raw, buf[:keep]...)
			}
			r.overflow = true
		}
		r.br.Discard(n)
		if end {
			return r.finish(nil)
		}
	}
}

// scan reads buf for line ends, and reports how much of it belongs to the
// event, and whether the event ends there (at a blank line).
func (r *SSEReader) scan(buf []byte, atLineStart *bool) (n int, end bool) {
	for i := 0; i < len(buf); {
		if r.pendingCR {
			r.pendingCR = false
			if buf[i] == '\n' { // the rest of a "\r\n"
				i++
				continue
			}
		}
		j := lineEnd(buf[i:])
		if j < 0 {
			*atLineStart = false
			return len(buf), false
		}
		if j > 0 {
			*atLineStart = false
		}
		i += j
		r.pendingCR = buf[i] == '\r'
		i++
		if *atLineStart { // a blank line: the event ends
			if r.pendingCR && i < len(buf) && buf[i] == '\n' {
				r.pendingCR = false
				i++
			}
			return i, true
		}
		*atLineStart = true
	}
	return len(buf), false
}

// lineEnd returns the index of the first "\r" or "\n" in b, or -1.
func lineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	if lf < 0 {
		lf = len(b)
	}
	if cr := bytes.IndexByte(b[:lf], '\r'); cr >= 0 {
		return cr
	}
	if lf == len(b) {
		return -1
	}
	return lf
}

// finish parses the collected lines into the event.
func (r *SSEReader) finish(readErr error) (*Event, error) {
	if r.overflow {
		return nil, &EventTooLargeError{Head: dataHead(r.raw, headSize), Size: r.size}
	}
	if len(r.raw) == 0 && readErr == io.EOF {
		return nil, io.EOF
	}
	r.ev.Raw, r.ev.Cut = r.raw, readErr == io.EOF
	for _, line := range splitLines(r.raw) {
		r.field(line)
	}
	if r.ev.HasData {
		r.ev.Data = r.data
	}
	return &r.ev, nil
}

// field applies one line of an event.
func (r *SSEReader) field(line []byte) {
	if len(line) == 0 || line[0] == ':' {
		return // blank, or a comment
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		value = bytes.TrimPrefix(value, []byte(" "))
	}
	switch string(name) {
	case "data":
		if r.ev.HasData {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
		r.ev.HasData = true
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.ev.ID, r.ev.HasID = value, true
		}
	case "event":
		r.ev.Type = value
	case "retry":
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 && isAllDigits(value) {
			r.ev.Retry, r.ev.HasRetry = n, true
		}
	}
}

func isAllDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return len(b) > 0
}

// dataHead returns the first n bytes of the data fields of an event's raw
// lines (the last of which may be cut short).
func dataHead(raw []byte, n int) []byte {
	var head []byte
	for _, line := range splitLines(raw) {
		value, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		if len(head) > 0 {
			head = append(head, '\n')
		}
		head = append(head, bytes.TrimPrefix(value, []byte(" "))...)
		if len(head) >= n {
			return head[:n]
		}
	}
	return head
}

// splitLines splits an event's bytes into lines, without their "\r\n",
// "\n" or "\r".
func splitLines(b []byte) [][]byte {
	var lines [][]byte
	for len(b) > 0 {
		i := lineEnd(b)
		if i < 0 {
			return append(lines, b)
		}
		lines = append(lines, b[:i])
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
	}
	return lines
}

// NormalizeLineEnds returns b with every "\r\n" and lone "\r" made "\n"
// (b itself when it has no "\r"): an event a reader that splits only on
// "\n" reads as this package does.
func NormalizeLineEnds(b []byte) []byte {
	if bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] != '\r':
			out = append(out, b[i])
		case i+1 < len(b) && b[i+1] == '\n':
		default:
			out = append(out, '\n')
		}
	}
	return out
}

// AppendSSEMessage appends an SSE event carrying one JSON-RPC message (which
// holds no newline) to dst, with an id field when id is not empty.
func AppendSSEMessage(dst []byte, id string, msg []byte) []byte {
	dst = append(dst, "event: message\n"...)
	if id != "" {
		dst = append(append(append(dst, "id: "...), id...), '\n')
	}
	dst = append(append(dst, "data: "...), msg...)
	return append(dst, "\n\n"...)
}
