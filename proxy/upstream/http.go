package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"strings"

	"github.com/valyala/fasthttp"
)

const (
	SessionHeader = "Mcp-Session-Id"
	VersionHeader = "MCP-Protocol-Version"
)

// brief returns an error's message without what fasthttp quotes of the
// bytes it could not read ("..., contents: ..."): an upstream's headers
// may hold anything, and they go neither to the client nor to the log.
func Brief(err error) string {
	msg := err.Error()
	if _, ok := errors.AsType[*fasthttp.ErrSmallBuffer](err); ok {
		size := ""
		if i := strings.Index(msg, "buffer size="); i >= 0 {
			size = " (" + strings.TrimRight(strings.Fields(msg[i:])[0], ",") + ")"
		}
		return "its response headers are larger than limits.max_response_header_bytes allows" + size
	}
	if i := strings.Index(msg, "contents:"); i >= 0 {
		msg = strings.TrimRight(msg[:i], " ,:")
	}
	return msg[:min(len(msg), 300)]
}

// ReadAll reads r, a response body of length bytes (-1: unknown), to its
// end, or its first max+1 bytes when it is longer than max (so that the
// caller sees it was). A body of known length within max is read into one
// buffer of its size: no growing, no limiting reader.
func ReadAll(r io.Reader, length, max int) ([]byte, error) {
	if length < 0 || length > max {
		return io.ReadAll(io.LimitReader(r, int64(max)+1))
	}
	buf := make([]byte, length+1) // one more, to read up to the end
	n, err := io.ReadFull(r, buf)
	switch {
	case err == nil: // longer than it said: what was read, as a longer body's
		return buf, nil
	case n == length && (err == io.ErrUnexpectedEOF || err == io.EOF):
		return buf[:n], nil
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return buf[:n], io.ErrUnexpectedEOF // shorter than it said
	}
	return buf[:n], err
}

// bodyOf returns a streaming response's body.
func BodyOf(resp *fasthttp.Response) fasthttp.ReadCloserWithError {
	if rc, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
		return rc
	}
	return nopCloser{resp.BodyStream()}
}

type nopCloser struct{ io.Reader }

// CloseWithError does nothing: the body has nothing to close.
func (nopCloser) CloseWithError(error) error { return nil }

// readHead reads up to 64 KiB of a response's body, then closes and
// releases the response.
func ReadHead(resp *fasthttp.Response) []byte {
	var body []byte
	if bs := resp.BodyStream(); bs != nil {
		body, _ = io.ReadAll(io.LimitReader(bs, 64<<10))
		resp.CloseBodyStream()
	} else {
		body = append(body, resp.Body()...)
	}
	fasthttp.ReleaseResponse(resp)
	return body
}

// peek returns the value of the first header called name, matched without
// regard to case as HTTP requires: the upstream client keeps names as
// received, and servers such as uvicorn send them in lower case.
func Peek(all iter.Seq2[[]byte, []byte], name string) []byte {
	for k, v := range all {
		if strings.EqualFold(string(k), name) {
			return v
		}
	}
	return nil
}

// isEventStream reports whether a Content-Type is text/event-stream, with
// or without parameters.
func IsEventStream(contentType []byte) bool {
	const want = "text/event-stream"
	ct := bytes.TrimSpace(contentType)
	if len(ct) < len(want) || !strings.EqualFold(string(ct[:len(want)]), want) {
		return false
	}
	rest := bytes.TrimLeft(ct[len(want):], " \t")
	return len(rest) == 0 || rest[0] == ';'
}

// OneLine returns a POST's body as exactly one line for a child's stdin: a
// message spread over several lines (pretty-printed JSON is valid) would
// otherwise reach the child as several messages, some of them a client's
// own inventions. JSON strings cannot hold a raw line break, so compacting
// removes every one; a body that does not compact is not JSON. A body of
// one line already is returned as it is (not copied: the session it goes
// to copies what it keeps).
func OneLine(body []byte) ([]byte, error) {
	if !bytes.ContainsAny(body, "\r\n") {
		return body, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(body))
	if err := json.Compact(&buf, body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
