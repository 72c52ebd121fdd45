//go:build !unix

package connlimit

// descriptorLimit cannot be read here (Windows has no descriptor limit of
// this kind): only Options.Max bounds the connections.
func descriptorLimit() (int, bool) { return 0, false }
