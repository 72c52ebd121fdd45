package framing_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// toolResult builds a tools/call response whose text content is size bytes.
func toolResult(size int) []byte {
	return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":%q}],"isError":false}}`,
		strings.Repeat("x", size)))
}

func BenchmarkParse(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 1 << 20} {
		frame := toolResult(size)
		b.Run(fmt.Sprintf("response-%d", size), func(b *testing.B) {
			var f framing.Frame
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := f.Parse(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	req := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{"n":1},"_meta":{"progressToken":"tok-7"}}}`)
	b.Run("request-string-token", func(b *testing.B) {
		var f framing.Frame
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Parse(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReader(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 1 << 20} {
		frame := toolResult(size)
		const n = 64
		input := bytes.Repeat(append(frame, '\n'), n)
		b.Run(fmt.Sprintf("frame-%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				r := framing.NewReader(bytes.NewReader(input), 0)
				for range n {
					f, err := r.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					buf = f
				}
			}
		})
	}
}
