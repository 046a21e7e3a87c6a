// Package docs embeds the documentation that nodus-server serves itself:
// one page per registered error reason, at /docs/errors/{reason}.
package docs

import "embed"

// ErrorPages holds errors/{Reason}.md.
//
//go:embed errors/*.md
var ErrorPages embed.FS
