// Package pipeline describes a pipeline: its steps in order, and for each the kind that
// decides its recovery rule.
package pipeline
