package framing

import "encoding/json"

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
	dst = append(dst, raw[:span.Start]...)
	dst = id.AppendJSON(dst)
	return append(dst, raw[span.End:]...)
}
