package framing

import (
	"encoding/json"
	"slices"
)

// JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification#error_object).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// ErrorObject is a JSON-RPC error object.
type ErrorObject struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// AppendErrorResponse appends a JSON-RPC error response for id (null when
// id is the zero ID) to dst.
func AppendErrorResponse(dst []byte, id ID, e ErrorObject) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = id.AppendJSON(dst)
	dst = append(dst, `,"error":`...)
	b, err := json.Marshal(e)
	if err != nil { // Data would not marshal: drop it rather than the error
		e.Data = nil
		b, _ = json.Marshal(e)
	}
	dst = append(dst, b...)
	return append(dst, '}')
}

// Splice appends raw to dst with the value at span replaced by id's JSON.
func Splice(dst, raw []byte, span Span, id ID) []byte {
	return Rewrite(dst, raw, Edit{span, id})
}

// Edit replaces the value at Span with To's JSON.
type Edit struct {
	Span Span
	To   ID
}

// Rewrite appends raw to dst with every edit applied. The edits' spans must
// not overlap; they may come in any order.
func Rewrite(dst, raw []byte, edits ...Edit) []byte {
	if len(edits) == 2 && edits[1].Span.Start < edits[0].Span.Start {
		edits[0], edits[1] = edits[1], edits[0]
	} else if len(edits) > 2 {
		slices.SortFunc(edits, func(a, b Edit) int { return a.Span.Start - b.Span.Start })
	}
	at := 0
	for _, e := range edits {
		dst = append(dst, raw[at:e.Span.Start]...)
		dst = e.To.AppendJSON(dst)
		at = e.Span.End
	}
	return append(dst, raw[at:]...)
}

// AppendCancelled appends a notifications/cancelled for the request id,
// with the reason when there is one: the one builder of the proxy's own
// cancels, whatever the transport.
func AppendCancelled(dst []byte, id ID, reason string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`...)
	dst = id.AppendJSON(dst)
	if reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = StringID(reason).AppendJSON(dst)
	}
	return append(dst, "}}"...)
}
