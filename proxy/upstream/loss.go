package upstream

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/keepalive"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Spoiled says why data, the JSON answer to a POST that carried the
// request id (read with err, within limit bytes), is no answer to it
// (SpoiledBody, or NotAnswered); "" when it answers id, parsed into f.
// Every front that reads a JSON answer asks it, so that a request never
// waits for an answer that cannot come.
func Spoiled(data []byte, err error, limit int, id framing.ID, f *framing.Frame) string {
	if why := SpoiledBody(data, err, limit, f); why != "" {
		return why
	}
	if !slices.ContainsFunc(f.Msgs, func(m framing.Message) bool { return m.Kind == framing.KindResponse && m.ID == id }) {
		return NotAnswered
	}
	return ""
}

// NotAnswered is why a request whose POST was answered with JSON-RPC that
// does not answer it (the answer to another id, or a batch without it)
// is answered by the proxy.
const NotAnswered = "the upstream's answer does not answer the request"

// SpoiledBody says why data, a JSON answer read with err within limit
// bytes, is no JSON-RPC at all: cut short, unreadable, over the limit,
// empty, or not JSON-RPC. "" when it is, parsed into f.
func SpoiledBody(data []byte, err error, limit int, f *framing.Frame) string {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the upstream's answer was cut short"
	case err != nil:
		return "reading the upstream's answer failed: " + Brief(err)
	case len(data) > limit:
		return fmt.Sprintf("the upstream's answer is over the size limit of %d bytes (limits.max_frame_size)", limit)
	case len(data) == 0:
		return "the upstream answered with an empty body"
	case f.Parse(data) != nil:
		return "the upstream's answer is not JSON-RPC"
	}
	return ""
}

// PostLoss is the Loss of a request whose POST failed with err, before an
// answer: lost, and run only if some of it may have reached the server
// (keepalive.Unsent); with what to tell the client.
func PostLoss(err error) (proxy.Loss, string) {
	if keepalive.Unsent(err) {
		return proxy.Loss{Reason: proxy.ReasonLost}, "the upstream MCP server could not be reached: " + Brief(err)
	}
	return proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true},
		"the upstream MCP server's connection failed after the request was sent: " + Brief(err)
}

// Lost logs, once, that the proxy answers the request id in its
// upstream's place (l, why), and counts it (count, if not nil): at warn,
// or at error for an upstream that could not be reached at all, which
// the operator is to mend.
func Lost(log *zap.Logger, count func(), id framing.ID, l proxy.Loss, why string) {
	msg, lvl := "a request is answered in the upstream's place", zapcore.WarnLevel
	if l.Reason == proxy.ReasonLost && !l.MayHaveRun {
		msg, lvl = "upstream unreachable", zapcore.ErrorLevel
	}
	log.Log(lvl, msg, zap.Stringer("id", id), zap.String("reason", l.Reason),
		zap.Bool("may_have_run", l.MayHaveRun), zap.String("why", why))
	if count != nil {
		count()
	}
}
