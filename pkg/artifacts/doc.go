// Package artifacts stores step outputs: small ones inline in the checkpoint, larger ones in
// the object store under content-addressed names that are never overwritten, and every read
// checks the digest the checkpoint recorded. Read streams an output, so that a large one
// need not be held whole.
package artifacts
