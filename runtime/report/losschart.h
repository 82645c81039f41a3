/* losschart: a run's --losses file drawn as an SVG chart (zinfdump
 * --losses FILE --svg OUT.svg), for a person without TensorBoard.
 *
 * The file is what zinfrun --losses appends, one line a step or an
 * evaluation:
 *     step N loss L grad_norm G
 *     eval step N loss L batches K
 * A resumed run appends to the same file; a step written twice (a run
 * that redid steps after a crash) keeps its last line. The chart: the
 * training loss against the step (a line), the evaluation loss (a line
 * with a dot per evaluation), both on the left axis, and, when the plan's
 * learning-rate schedule is given, the learning rate dashed on a right
 * axis; labelled axes with round ticks, a title and a legend. Standalone
 * SVG 1.1, no script, no external font or style: any browser, rsvg and
 * Inkscape show it.
 *
 * Nothing here prints; errors are one line "FILE:LINE: what is wrong" in
 * the caller's buffer. */
#ifndef ZINF_LOSSCHART_H
#define ZINF_LOSSCHART_H
#include <stdint.h>
#include <stdio.h>
#include "adam.h"

typedef struct LossPoint {
    int64_t step;
    double loss;
    int line; /* of the file: the last line of a step wins */
} LossPoint;

typedef struct LossSeries {
    LossPoint *train, *eval; /* sorted by step, one point a step */
    int ntrain, neval;
} LossSeries;

/* Reads a --losses file into s (freed with losschart_free, also after an
 * error). A file with no step and no eval line is an error. */
int losschart_read(const char *path, LossSeries *s, char *err, size_t n);
void losschart_free(LossSeries *s);

/* Writes the chart of s to f. title: shown on top (escaped); lr: the
 * schedule whose rate at each training step is drawn on the right axis,
 * or NULL. 0, or -1 with err when f could not be written. */
int losschart_svg(FILE *f, const LossSeries *s, const char *title, const AdamSchedule *lr, char *err, size_t n);

#endif
