package policy

import (
	"net/url"
	"strings"
)

// secretPaths are webhook hosts whose URL path is the secret (a Slack
// incoming webhook's /services/T/B/SECRET, a Discord webhook's
// /api/webhooks/ID/TOKEN): their paths are never shown.
var secretPaths = []string{"hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com", "outlook.office.com",
	"hooks.zapier.com", "maker.ifttt.com", "api.telegram.org", "events.pagerduty.com", "chat.googleapis.com"}

// RedactURL returns a webhook URL as logs, the audit trail, the status
// page and hooks list show it: without its userinfo, with every query
// value replaced, and without its path when the host is one whose paths
// carry the secret, or when wholePath is set. A URL that does not parse
// (or has no host) is "".
func RedactURL(raw string, wholePath bool) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode() // keys sorted, values hidden
	}
	u.Fragment, u.RawFragment = "", ""
	if wholePath || secretHost(u.Hostname()) {
		if u.Path != "" && u.Path != "/" {
			u.Path, u.RawPath = "/REDACTED", ""
		}
	}
	return u.String()
}

// secretHost reports whether host is, or is under, one of secretPaths.
func secretHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range secretPaths {
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}
