// Package envexpand takes environment variables into settings that name
// them as ${NAME}: header values (--header, http.upstream_headers) and
// webhooks' URLs and headers, so that secrets stay out of configuration
// files and client configurations.
package envexpand

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Expand replaces each ${NAME} in v with the environment variable NAME,
// and $$ with a $; any other $ stays as it is. A variable that is not set
// is an error naming it, never an empty value.
func Expand(v string) (string, error) {
	return expand(v, os.LookupEnv)
}

func expand(v string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(v, "$") {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] != '$':
			b.WriteByte(v[i])
		case strings.HasPrefix(v[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(v[i:], "${"):
			end := strings.IndexByte(v[i:], '}')
			if end < 0 {
				return "", errors.New("${ without its }")
			}
			name := v[i+2 : i+end]
			val, ok := lookup(name)
			if !ok {
				return "", fmt.Errorf("${%s} is not set in the environment", name)
			}
			b.WriteString(val)
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}
