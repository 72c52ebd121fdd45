package main

import (
	"testing"
)

// blankLineServer is a real stdio server (a shell loop) that follows every
// answer with an empty line, as print(json_text + "\n") does.
var blankLineServer = []string{"sh", "-c",
	`while IFS= read -r l; do printf '%s\n\n' '{"jsonrpc":"2.0","id":"init","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"blank","version":"1"}}}'; done`}

// TestE2EBlankLinesHoldNothingBack: a client that ends its frame with a
// blank line, and a server that does the same, are each answered without
// sending anything more (issue 8, item 1).
func TestE2EBlankLinesHoldNothingBack(t *testing.T) {
	w := startWrapped(t, append([]string{"--"}, blankLineServer...)...)
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}` + "\n")
	w.recvUntil(isResponse("init"))
}
