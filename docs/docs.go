// Package docs embeds the documentation that Nodus' programs carry:
// nodus-server serves one page per registered error reason at
// /docs/errors/{reason}; the nodus CLI prints those and the pages of its
// own reasons (`nodus errors REASON`) without asking a server.
package docs

import "embed"

// ErrorPages holds errors/{Reason}.md: the server's reasons.
//
//go:embed errors/*.md
var ErrorPages embed.FS

// CLIPages holds cli/{Reason}.md: the reasons of the nodus CLI's own
// failures, which no server sends.
//
//go:embed cli/*.md
var CLIPages embed.FS
