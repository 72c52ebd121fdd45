package framing_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

var fuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p"}}}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"1","reason":"r"}}`,
	`{"jsonrpc":"2.0","id":"a\u00e9","result":{"task":{"taskId":"t"}}}`,
	`[{"id":1,"method":"a"},{"method":"b"}]`,
	`{"id":null,"error":{"code":-32700,"message":"x"}}`,
	`{"id":1.5e3,"method":"x"}`, `{"a":[[[]]],"id":0}`, `"str"`, `nul`, `{"id":-0,"method":"m"}`,
}

// FuzzParse checks the classifier against encoding/json: it must agree on
// validity, and on the id of every request and response it accepts.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr framing.Frame
		err := fr.Parse(data)
		var se *framing.SyntaxError
		if errors.As(err, &se) {
			if json.Valid(data) && !bytes.Contains(data, []byte("[[[[[[[[")) {
				t.Fatalf("Parse(%q) = %v, but encoding/json accepts it", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse(%q) accepted invalid JSON (err %v)", data, err)
		}
		if err != nil || fr.Batch {
			return
		}
		m := fr.Msgs[0]
		// A map keeps member names as written: JSON-RPC's are
		// case-sensitive, where a struct would take "pArAms" as params.
		var members map[string]json.RawMessage
		if json.Unmarshal(data, &members) != nil || m.Kind == framing.KindInvalid {
			return
		}
		obj := struct{ ID, Params json.RawMessage }{members["id"], members["params"]}
		if span := m.ParamsSpan; !bytes.Equal(m.Raw[span.Start:span.End], bytes.TrimSpace(obj.Params)) {
			t.Fatalf("ParamsSpan %v covers %q, want %q", span, m.Raw[span.Start:span.End], obj.Params)
		}
		if !m.ID.IsValid() {
			return
		}
		var want any
		json.Unmarshal(obj.ID, &want)
		var got any
		json.Unmarshal([]byte(m.ID.String()), &got)
		if got != want {
			t.Fatalf("Parse(%q).ID = %v, encoding/json says %v", data, got, want)
		}
		if span := m.IDSpan; !bytes.Equal(bytes.TrimSpace(m.Raw[span.Start:span.End]), bytes.TrimSpace(obj.ID)) {
			t.Fatalf("IDSpan %v covers %q, want %q", span, m.Raw[span.Start:span.End], obj.ID)
		}
	})
}

// FuzzReader checks that the reader yields exactly the non-blank lines of
// its input, with over-long ones replaced by an error, whatever the bytes.
func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\n  \nccccccccc\nd"), 4)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<20 {
			max = 8
		}
		var want []string
		for _, raw := range bytes.Split(data, []byte("\n")) {
			line := bytes.TrimRight(raw, " \t\r")
			if len(bytes.TrimSuffix(raw, []byte("\r"))) > max {
				want = append(want, "ERR") // size is checked before blankness
				continue
			}
			if len(bytes.TrimLeft(line, " \t\r")) == 0 {
				continue
			}
			want = append(want, string(line))
		}
		r := framing.NewReader(bytes.NewReader(data), max)
		var got []string
		for {
			fr, err := r.Read(nil)
			var tl *framing.FrameTooLargeError
			if err == io.EOF {
				break
			} else if errors.As(err, &tl) {
				got = append(got, "ERR")
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(fr))
		}
		if len(got) != len(want) {
			t.Fatalf("Read(%q, max %d) = %q, want %q", data, max, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Read(%q, max %d) = %q, want %q", data, max, got, want)
			}
		}
	})
}
