package framing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// headSize is how much of an over-long line a FrameTooLargeError keeps.
const headSize = 4 << 10

// DefaultMaxFrameSize is the frame limit when none is configured: 64 MiB.
const DefaultMaxFrameSize = 64 << 20

// A FrameTooLargeError reports a line longer than the reader's limit. The
// reader has already skipped the rest of the line, so the next Read returns
// the next frame.
type FrameTooLargeError struct {
	Size  int64 // the line's length in bytes
	Limit int
	// Head is the start of the line (up to the reader's buffer size), kept so
	// that the caller can still find the id of the message it held.
	Head []byte
}

// Error implements error.
func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds the limit of %d bytes", e.Size, e.Limit)
}

// Reader reads newline-delimited frames. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int
}

// NewReader returns a Reader over r that refuses frames longer than max
// bytes (DefaultMaxFrameSize if max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Read appends the next non-blank line, without its trailing white space
// and "\n", to dst[:0] and returns it, so the frame always starts at dst[0]. At the end of input it returns io.EOF; a last line
// without a newline is still returned as a frame first. A line over the limit
// yields a *FrameTooLargeError after it has been skipped; any other error
// comes from the underlying reader.
func (r *Reader) Read(dst []byte) ([]byte, error) {
	for {
		frame, err := r.readLine(dst[:0])
		if err != nil {
			return frame, err
		}
		frame = trimRight(frame)
		if len(trimLeft(frame)) > 0 {
			return frame, nil
		}
		dst = frame
	}
}

// Ready reports whether the next Read returns a frame without waiting for
// input: whether what is buffered holds a whole non-blank line. Blank lines
// and white space before the next frame are skipped on the way, so a frame
// followed by an empty line (or by part of the next frame) is not mistaken
// for the start of a burst: a relay that writes out what it has queued when
// Ready is false never holds a frame back while it waits for more input.
func (r *Reader) Ready() bool {
	n := r.br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.br.Peek(n) // never waits: n bytes are buffered
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	r.br.Discard(i)
	return bytes.IndexByte(b[i:], '\n') >= 0
}

// readLine reads one line into dst. A partial last line is returned with a
// nil error; the next call reports io.EOF.
func (r *Reader) readLine(dst []byte) ([]byte, error) {
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(dst)+len(chunk) > r.max+2 { // +2: "\r\n" does not count
			head := append(dst, chunk...)
			if len(head) > headSize {
				head = head[:headSize]
			}
			return dst[:0], r.discard(int64(len(dst)+len(chunk)), err, head)
		}
		dst = appendDoubling(dst, chunk)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == nil || (err == io.EOF && len(dst) > 0):
			return r.checkSize(dst)
		default:
			return dst, err
		}
	}
}

// appendDoubling is append with a growth factor of two. append grows large
// slices by about 1.25x, so reading a 64 MiB line would leave some four
// times its size in discarded arrays; doubling bounds that garbage by the
// line's own size. Pages past the line's end are never touched.
func appendDoubling(dst, p []byte) []byte {
	if need := len(dst) + len(p); need > cap(dst) {
		grown := make([]byte, len(dst), max(need, 2*cap(dst)))
		copy(grown, dst)
		dst = grown
	}
	return append(dst, p...)
}

// checkSize refuses a complete line whose content, without its line ending,
// is over the limit.
func (r *Reader) checkSize(line []byte) ([]byte, error) {
	n := len(line)
	if n > 0 && line[n-1] == '\n' {
		n--
	}
	if n > 0 && line[n-1] == '\r' {
		n--
	}
	if n > r.max {
		head := line[:min(n, headSize)]
		return line[:0], &FrameTooLargeError{Size: int64(n), Limit: r.max, Head: append([]byte(nil), head...)}
	}
	return line, nil
}

// discard skips to the end of an over-long line, counting its length.
func (r *Reader) discard(n int64, err error, head []byte) error {
	head = append([]byte(nil), head...) // the buffer is about to be reused
	for errors.Is(err, bufio.ErrBufferFull) {
		var chunk []byte
		chunk, err = r.br.ReadSlice('\n')
		n += int64(len(chunk))
	}
	switch {
	case err == nil:
		n-- // the newline
	case err != io.EOF:
		return err
	}
	return &FrameTooLargeError{Size: n, Limit: r.max, Head: head} // may count a "\r"
}

func trimRight(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func trimLeft(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// LineSplitter cuts a byte stream written in pieces into its lines: a
// write may hold several, or part of one. The zero value is ready.
type LineSplitter struct{ partial []byte }

// Split hands each whole line of p that is not blank to send (the line is
// valid only during the call), until send reports false, and keeps the
// start of a line that p does not end.
func (l *LineSplitter) Split(p []byte, send func(line []byte) bool) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			return
		}
		line := p[:i]
		if len(l.partial) > 0 {
			line = append(l.partial, line...)
			l.partial = l.partial[:0]
		}
		p = p[i+1:]
		if len(bytes.TrimSpace(line)) > 0 && !send(line) {
			return
		}
	}
}
