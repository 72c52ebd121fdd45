// Command slowserver is the example MCP server bundled with mcp-cancel-proxy,
// on stdio: tools that honour cancellation, tools that ignore it, and tools
// to provoke the cases a cancellation proxy must handle. The proxy binary
// serves the same server as `mcp-cancel-proxy example-server`.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/exampleserver"
)

func main() {
	if err := exampleserver.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "slowserver:", err)
		os.Exit(1)
	}
}
