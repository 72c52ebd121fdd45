package framing

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
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
}

// ErrEventTooLarge reports an event over the reader's limit; the reader has
// skipped the rest of it.
var ErrEventTooLarge = errors.New("server-sent event exceeds the size limit")

// SSEReader reads server-sent events. It is not safe for concurrent use.
type SSEReader struct {
	br       *bufio.Reader
	max      int
	started  bool
	ev       Event
	raw      []byte
	data     []byte
	overflow bool
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
// in "\n" or "\r\n"; a lone "\r" is not taken for a line end.
func (r *SSEReader) Next() (*Event, error) {
	r.ev = Event{}
	r.raw, r.data, r.overflow = r.raw[:0], r.data[:0], false
	atLineStart := true
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !r.started && len(chunk) > 0 {
			r.started = true
			chunk = bytes.TrimPrefix(chunk, bom)
		}
		blank := atLineStart && (string(chunk) == "\n" || string(chunk) == "\r\n")
		atLineStart = len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if len(r.raw)+len(chunk) > r.max {
			r.overflow = true
		} else {
			r.raw = append(r.raw, chunk...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue // a long line: keep reading it
		case err != nil && err != io.EOF:
			return nil, err
		case blank || err == io.EOF:
			return r.finish(err)
		}
	}
}

// finish parses the collected lines into the event.
func (r *SSEReader) finish(readErr error) (*Event, error) {
	if r.overflow {
		return nil, ErrEventTooLarge
	}
	if len(r.raw) == 0 && readErr == io.EOF {
		return nil, io.EOF
	}
	r.ev.Raw = r.raw
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

// splitLines splits an event's bytes into lines, without their "\n" or
// "\r\n".
func splitLines(b []byte) [][]byte {
	var lines [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return append(lines, bytes.TrimSuffix(b, []byte("\r")))
		}
		lines = append(lines, bytes.TrimSuffix(b[:i], []byte("\r")))
		b = b[i+1:]
	}
	return lines
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
