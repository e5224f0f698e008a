// Package undo is the compensator: it reverses a run's outside effects, newest first, from
// the run's saga records (DESIGN.md, "Compensation (the saga)"), for any pipeline.
//
// An undo takes the run's lease as step "undo", raises the fences of the pipeline's systems,
// and applies the plan's reversals one by one, each a keyed, fenced write, recording its
// cursor in the checkpoint after each. So an interrupted undo resumes where it stopped, and a
// repeated one finds every reversal already made and makes none twice.
//
// What a reversal is belongs to the outside system: the pipeline registers a System for each
// system name its effects carry (saga.Reverse.System), Config.Systems. An effect of a system
// with none registered is never skipped: the undo hands the run over naming it, before it
// reverses anything more.
package undo
