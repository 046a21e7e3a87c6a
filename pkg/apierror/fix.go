package apierror

import "context"

type fixKey struct{}

// fixNote carries a fix that code deep in a request chose, up to the envelope
// that writes the error body.
type fixNote struct{ fix string }

// WithFixNote prepares ctx to carry a request-specific fix.
func WithFixNote(ctx context.Context) context.Context {
	return context.WithValue(ctx, fixKey{}, &fixNote{})
}

// SetFix records the next step for the caller of the request in ctx. It
// replaces the registry's generic fix for this request's error, if any.
func SetFix(ctx context.Context, fix string) {
	if n, ok := ctx.Value(fixKey{}).(*fixNote); ok {
		n.fix = fix
	}
}

// FixFrom returns the fix recorded by SetFix, or "".
func FixFrom(ctx context.Context) string {
	if n, ok := ctx.Value(fixKey{}).(*fixNote); ok {
		return n.fix
	}
	return ""
}
