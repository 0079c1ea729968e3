// Which calls of the job's iteration are exposed (on the iteration's critical path) and which are hidden under
// computation. NCCL-free. The trace reports it; only the step guard's estimated arms read it (through
// ExposureRecorder::hiddenPositions; docs/online-search.md, "Exposure").
//
// The signal: how the iteration time responds when a call's own time changes. Over complete iterations (every
// position of the communicator's detected iteration timed, and the next iteration's start), the iteration time
// is regressed on every position's kernel window at once (least squares): the slope of position p is about 1
// where the iteration waits for the call, about 0 where computation hides it. One regressor per position, not
// one at a time: the step guard's blocks and a task's trials change several positions together, and a simple
// slope then credits a hidden call with an exposed one's change. Positions whose windows moved in lockstep in
// every sample (the calls of one task in one segment) cannot be told apart: they share one slope (their sum),
// and are called hidden only when that sum is (a call never makes the iteration shorter by being longer).
//
// A slope well outside [0, 1] (a call's own time moves the iteration by none to all of it) says the windows
// move with the iteration for other reasons, a wait for a peer inside the window or computation slowed beside
// the call (Result::outOfBounds). Read on the per-task fit (estimateGroups), where the recorder then gives no
// verdict at all: one slope a position leaves the bound where positions are nearly collinear (two hidden
// buckets of the emulator's noiseless DDP-like step: -0.48 and +0.48 +- 0.05, summing to 0).
//
// A sample the others contradict (a window credited to the wrong call, an iteration clock across a pause) can
// carry a slope on its own: samples are left out one at a time (the one with the largest residual in the
// regression without it), up to maxOutlierShare of them, and the fit kept is the one where each sample left
// out lowered the residual's deviation by more than an outlierSigmas-deviation sample of noise would.
//
// Also reported, not used for the verdict: the share of the iteration left after the call's end on its
// communicator's stream ("tail"). It cannot see what the computation waits for: a call the optimizer waits on,
// followed by the forward pass, has a long tail and is exposed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace autoccl::engine {

struct ExposureOptions {
  size_t maxPositions = 64;   // longer iterations are not estimated (the regression has one unknown a position)
  size_t maxSamples = 256;    // the latest complete iterations kept
  size_t minDof = 4;          // distinct samples beyond the unknowns before any slope is given
  double exposedAbove = 0.5;  // slope threshold between hidden and exposed
  double maxSe = 0.2;         // a verdict needs the slope's standard error at most this (else unknown)
  double aliasCorr = 0.9999;  // windows this correlated (or both constant) move in lockstep: one shared slope
  double outlierSigmas = 5.0;     // a sample left out must be worth this many deviations of the residual
  double outlierFloorUs = 0.05;   // residuals up to this are rounding, never outliers
  double maxOutlierShare = 0.2;   // at most this share of the samples is left out
  // A slope beyond [0, 1] (a lockstep group's: [0, its size]) by more than this many standard errors, and
  // by more than boundFloor: Result::outOfBounds
  double boundSigmas = 3.0;
  double boundFloor = 0.05;
};

class ExposureEstimator {
 public:
  explicit ExposureEstimator(ExposureOptions o = ExposureOptions());
  // One complete iteration of `period` positions: its time (its first call's start to the next iteration's),
  // each position's start (from the iteration's start) and kernel window, microseconds. An iteration of
  // another period than the samples kept drops them (the positions mean other calls now).
  void add(double iterUs, const std::vector<double>& startUs, const std::vector<double>& durUs);

  enum class Verdict { kUnknown, kHidden, kExposed };
  struct Position {
    double slope = 0, se = 0;  // the regression's slope and its standard error (slope of the group, if aliased)
    bool solved = false;       // false: no slope (too few samples, or its window never moved)
    int alias = -1;            // >= 0: moved in lockstep with this earlier position; the slope is the group's
    double tail = 0;           // mean share of the iteration after the call's end
    double meanUs = 0;         // mean window
    // The slope lies below 0 by more than the bound's margin (see Result::outOfBounds). No call's time
    // shortens its iteration: the fit split the slope of windows that move almost together.
    bool belowBound = false;
    Verdict verdict = Verdict::kUnknown;
  };
  struct Result {
    uint32_t period = 0;
    size_t samples = 0;
    size_t outliers = 0;  // samples left out of the regression (see outlierSigmas)
    double iterUs = 0;  // mean iteration time
    double residualUs = 0;  // standard deviation of the regression's residual
    // Distinct samples over the regressors of the fit kept: the slopes need minDof of them beyond the unknowns
    // (repeats of one pattern add no equation).
    size_t patterns = 0;
    // Some slope lies outside what a call's own time can do to the iteration: the windows move with the
    // iteration for other reasons (a wait for a peer inside the window, contention with the computation).
    // The verdicts are still set; ExposureRecorder voids them all when the per-task fit says this (on two
    // hosts of one H100, FSDP2's reduce-scatters read 1.22 +- 0.06 as a task), and a task's positions' when
    // one of them lies below the bound (Position::belowBound).
    bool outOfBounds = false;
    std::vector<Position> positions;
  };
  Result estimate() const;
  // The same regression with one regressor a group of positions (groupOf[p]: position p's group, numbered from
  // 0): the iteration time on each group's summed window. Result::positions are then the groups (alias: another
  // group's index): a group's slope is a mean of its calls' exposures, each weighted by its window's covariance
  // with the group's sum (given the other groups); the plain mean where the calls move together, as a task's do
  // under a search's trials. meanUs is the group's summed window (its tail means nothing). Where a task's windows
  // are nearly collinear, one slope a position is unknown and one a task may not be (the emulator's noiseless
  // DDP-like step). Empty when groupOf does not give every position a group, or above maxPositions.
  Result estimateGroups(const std::vector<uint32_t>& groupOf) const;
  uint32_t period() const { return period_; }
  size_t samples() const { return samples_.size(); }
  static const char* verdictName(Verdict v);

 private:
  struct Sample {
    double iterUs;
    std::vector<double> start, dur;
  };
  // The regression on the samples at `rows`: slopes, standard errors, lockstep groups and each row's residual.
  struct Fit {
    std::vector<Position> positions;
    std::vector<size_t> groupSize;
    std::vector<double> residual;  // by row, in the order of `rows`: each row's deleted residual
    double residualUs = 0;
    size_t patterns = 0;  // distinct samples over the regressors (0: none moved)
    bool solved = false;  // false: too few distinct samples for the unknowns, or no window moved
  };
  Fit fit(const std::vector<size_t>& rows) const;
  // Samples whose windows differ somewhere among cols: the regression's equations (a repeat adds none).
  size_t distinctRows(const std::vector<size_t>& rows, const std::vector<size_t>& cols) const;
  ExposureOptions o_;
  uint32_t period_ = 0;
  std::deque<Sample> samples_;
};

}  // namespace autoccl::engine
