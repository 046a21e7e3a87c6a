// Package secret makes the bearer secrets of AccessTokens and
// EnrollmentTokens: random, returned once, stored only as a SHA-256 hash.
package secret

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

type hashKey struct{}

// New returns a fresh secret.
func New() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// Hash is the verifier stored for a secret.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// WithHash carries the hash of the secret a create generated to the
// strategy that stores it.
func WithHash(ctx context.Context, hash string) context.Context {
	return context.WithValue(ctx, hashKey{}, hash)
}

// HashFrom returns the hash WithHash carried, or "".
func HashFrom(ctx context.Context) string {
	h, _ := ctx.Value(hashKey{}).(string)
	return h
}
