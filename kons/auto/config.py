"""Every tuning constant of :class:`~kons.Auto`, each with one line of why and the page that says what chose
it (the measurements themselves live there: ``docs/auto.md``'s "tuning constants", ``docs/drift-log.md``,
``docs/auto-variants.md``, ``benchmarks/results/``). The modules of :mod:`kons.auto` take them from here."""

from __future__ import annotations

from kons.preprocessing import TARGET_BOUND

__all__ = [
    "CHANGE_ENTRY_PRIOR",
    "CHANGE_LABEL_RATE",
    "CHANGE_LABEL_ROUNDS",
    "CONCEPT_TARGET_FADE",
    "EARLIER_REGRESSION_BOUND",
    "ENTRY_PRIOR",
    "FOREST_DIRICHLET",
    "FOREST_MAX_BYTES",
    "FOREST_MAX_DIM",
    "FOREST_MAX_NODES",
    "FOREST_PRIOR",
    "FOREST_TREES",
    "FOREST_WAKE_ROWS",
    "FRESH_BINS_KEPT",
    "FRESH_BINS_PRIOR",
    "GENERATIONS",
    "GENERATION_TARGET_PRIOR",
    "GRID",
    "LABEL_ENTRY_PRIOR",
    "LABEL_OWN_PRIOR",
    "LABEL_PICK_DISCOUNT",
    "LABEL_PICK_MARGIN",
    "LABEL_RATE",
    "LABEL_RATES",
    "LABEL_SHIFT_DEVIATIONS",
    "LABEL_SHIFT_LEAST_ROUNDS",
    "LABEL_SHIFT_RATIO",
    "LABEL_SHIFT_THRESHOLD",
    "LABEL_SWITCHING_PRIOR",
    "LABEL_VOTE_SHARE",
    "LABEL_WEIGHT_POWER",
    "LAGS",
    "LAGS_BURST",
    "LAGS_LONG",
    "LAGS_LONG_PRIOR",
    "LAGS_PRIOR",
    "LAGS_WAKE_ROWS",
    "LAGS_WARMUP_LINEAR_ROWS",
    "LAGS_WARMUP_ROWS",
    "LAGS_WARMUP_SHARE",
    "LAGS_WEIGHT_VARIANCE",
    "LEVEL_CEILING",
    "LIGHT_EVERY",
    "LIGHT_ROUNDS",
    "LIGHT_WEIGHT",
    "LINEAR_DIM_PER_KEY",
    "LONE_TARGET_DEVIATIONS",
    "MANY_CLASSES_LIGHT_ROUNDS",
    "MAX_COLUMNS",
    "MAX_DICTIONARY",
    "MAX_THRESHOLDS",
    "MAX_TREE_LEAVES",
    "MIX_BOUND",
    "MIX_EARLY_ROUNDS",
    "NAP_ROUNDS",
    "NAP_WEIGHT",
    "NEIGHBOURS",
    "NEIGHBOURS_MAX_DIM",
    "NEIGHBOURS_NAP_WEIGHT",
    "NEIGHBOURS_PRIOR",
    "NEIGHBOURS_WAKE_ROWS",
    "NEIGHBOUR_ROWS",
    "NUMBERS_WIDTH",
    "PROBATION_PRIOR",
    "PROBATION_ROUNDS",
    "RANGE_MARGIN",
    "RATES",
    "REGRESSION_BOUND",
    "REGRESSION_LONE_LOSS",
    "REGRESSION_LOSS_THRESHOLD",
    "REPLAY_ROWS",
    "RESTART_DELAYS",
    "SCORE_BOUND",
    "SWITCHING_PRIOR",
    "TREE_GRACES",
    "TREE_MAX_DIM",
    "TREE_PRIOR",
    "TREE_WAKE_ROWS",
    "WARMUP_NOISE",
    "WARMUP_RIDGE_PER_KEY",
    "WIDE_NUMBERS_NAP_WEIGHT",
    "WIDE_NUMBERS_STEP",
    "YOUNG_KERNELS",
    "YOUNG_KERNEL_PLAY",
    "YOUNG_KERNEL_STEPS",
    "YOUNG_LINEAR",
    "YOUNG_REGRESSION_LINEAR",
]

# ----------------------------------------------------------------- the grid's members
#: The base learners: (view, kind, width factor, step factor). Views: the standardised row ("raw") and its
#: signed log ("log", for heavy-tailed counts, sizes, durations); widths multiply the view's
#: median-heuristic width, steps the preprocessing's default step (docs/auto.md#grid).
GRID = (
    *(("raw", "nystrom", wf, sf) for wf in (1.0, 4.0) for sf in (0.1, 1.0, 10.0)),
    ("log", "nystrom", 1.0, 0.1),
    ("log", "nystrom", 1.0, 1.0),
    ("raw", "ons", 1.0, 1.0),
    ("raw", "ons", 1.0, 10.0),
    ("log", "ons", 1.0, 1.0),
)
#: The width factor of the raw view's kernel members that leave a record's categorical names out, as the
#: log view does: the wide ones, so that the narrow ones keep what a name that says much adds, and the
#: mixture has a raw kernel to weigh that a name that says nothing does not blur. Where the warm-up's
#: records hold such names they take instead the width of the rows without them (Grid.numbers_width): the
#: narrow members' width on the same records without the names (docs/auto-log.md#a-records-categorical-names).
NUMBERS_WIDTH = 4.0
#: The significance level of the warm-up's test of whether a record's categorical name says anything of the
#: target (kons.auto.grid.silent_names): a name whose p-value is not below it is left out of the raw view's
#: narrow kernel members too, as if absent from their geometry. So lax a level because the warm-up's rows
#: tell little, and a name that says much but is taken for silent loses more than a silent one kept costs:
#: the tuning streams chose it among three levels
#: (docs/auto-log.md#a-test-of-whether-a-name-says-anything-session-20).
NAME_EVIDENCE_LEVEL = 0.5
#: Where the warm-up hears a record's categorical name (the wide members then take its numbers at their
#: narrow width: Grid.numbers_width), one more kernel member takes its numbers at their width x
#: NUMBERS_WIDTH, at this step factor, so that a name never takes away the geometry the same records
#: without it have; in play from the grid's start, it naps once its weight has stayed below
#: WIDE_NUMBERS_NAP_WEIGHT for NAP_ROUNDS rounds. Adopted as an invariant of a record's names (neutral on
#: the tuning streams, which neither choose nor reject it; held-out kin8nm was seen before):
#: docs/auto-log.md#a-systematic-tuning-set-for-item-5-session-22.
WIDE_NUMBERS_STEP = 0.1
WIDE_NUMBERS_NAP_WEIGHT = 0.01
#: The coordinates a regression record's key counts for in the linear models' regularisers (ONS's
#: alpha - 1, the Bayesian linear prior's precision of a weight): a key is one number (or one name) however
#: many of the encoder's coordinates it takes, so the regulariser counts what the rows say, not the width
#: reserved for keys yet to come (kons.records.WIDTH_PER_KEY). On the tuning records half a coordinate a
#: key or one did best, then 2, 4 and the width; a classification record keeps the width: magic04's error rose
#: (docs/auto-log.md#the-linear-models-regularisers-count-a-records-keys).
LINEAR_DIM_PER_KEY = 1
#: The warm-up's Bayesian linear model's prior precision of a weight (and the rows of prior of its label's
#: within-class deviations) on a record whose width its first record set: this many coordinates a key the
#: encoder holds, within the records' width bounds, not the width. The warm-up was chosen with the width at
#: 8 a key; at the narrower width (a cheaper round) the prior followed the width, weighed the few buffered
#: rows more and lost tuning cpu_act (docs/auto.md#warmup_ridge_per_key). Arrays, sparse rows and a given
#: ``dim`` keep the width.
WARMUP_RIDGE_PER_KEY = 8
#: Dictionary bound of each Nystrom base: bounded cost per round (docs/auto.md#max_dictionary).
MAX_DICTIONARY = 200

# ----------------------------------------------------------------- restarts (docs/drift.md)
#: The members restarted at a change: the linear bases of both views at the default step, whose new
#: concept a small step learns slowly (docs/auto.md#young_linear).
YOUNG_LINEAR = (GRID.index(("raw", "ons", 1.0, 1.0)), GRID.index(("log", "ons", 1.0, 1.0)))
#: Regression restarts the raw view's linear member alone, its generation's last copy's slot left empty:
#: the log view's copy, on the tuning drifts, led a generation's first rounds on a few rows and erred more
#: than the raw view's copy after them (docs/drift-log.md, "The regression windows a rule can reach, and a
#: generation without the log view's linear copy").
YOUNG_REGRESSION_LINEAR = YOUNG_LINEAR[:1]
#: The steps of the kernel members restarted too, each in the geometry (view and width) heaviest under the
#: switching rate 0: a fresh grid's weight after a change sits on that geometry at the small step as much
#: as at the default one; the second-heaviest geometry it replaces helped less (docs/drift-log.md, "The kernel
#: copies' steps").
YOUNG_KERNEL_STEPS = (1.0, 0.1)
#: Kernel members restarted at a change (docs/auto.md#young_kernels).
YOUNG_KERNELS = len(YOUNG_KERNEL_STEPS)
#: How many times each kernel copy's weight counts against its generation's linear models in the
#: generation's first rounds' view (regression, ``Grid._played_weights``), the generation's total kept: a
#: fresh grid spreads that play over its eight kernel members where a generation copies one geometry, and
#: the oracle's play held to the generation's four kinds of expert erred as the generation plays
#: (docs/drift-log.md, "A generation's kernel copies count twice in its first rounds").
YOUNG_KERNEL_PLAY = 2.0
#: Generations alive at once: a new one replaces the oldest at a declared change, else the lighter
#: (docs/auto.md#generations).
GENERATIONS = 2
#: Rounds kept for a declared change's generation to learn since the change's estimated onset: the onset
#: must be estimated to the round (docs/auto.md#replay_rows; benchmarks/results/drift.md).
REPLAY_ROWS = 192
#: Rounds after a declared change at which a generation starts: at once, then after a gradual change
#: (docs/auto.md#restart_delays).
RESTART_DELAYS = (0, 128, 512)
#: The rounds' worth of weight the learner's scale of the target has in a generation's own scale when the
#: generation starts (regression): its first rows alone give no deviation, and a false alarm's generation
#: should learn much as the others do (a weight of 1 cost space_ga's one false alarm dearly;
#: docs/drift-log.md).
GENERATION_TARGET_PRIOR = 8.0
#: The rounds of its own over which that weight falls by e in the scale of the concept since the change,
#: whose units the mixture weighs the experts in: held, the old spread outweighs a shrunk one's rows for
#: thousands of rounds; in the generations' own scales a fading weight did worse (docs/drift-log.md).
CONCEPT_TARGET_FADE = 8.0
#: Each expert's prior in a generation started at a declared change: the switching rates alone move the
#: weight too slowly after a long stationary stretch (docs/auto.md#change_entry_prior).
CHANGE_ENTRY_PRIOR = 0.15
#: The prior a generation on trial falls to when its first round goes against it, so a false alarm costs
#: little (docs/auto.md#probation_prior; benchmarks/results/drift_stationary.md).
PROBATION_PRIOR = 0.05
#: Rounds within which a demoted generation can take back its entry's weight
#: (docs/auto.md#probation_rounds).
PROBATION_ROUNDS = 64
#: Each expert's prior in a delayed generation: small, the generation before is there already
#: (docs/auto.md#entry_prior).
ENTRY_PRIOR = 0.01
#: The prior of the threshold model started afresh at a change declared on two classes (a generation's
#: expert's), and the rounds through which it is kept at the changes declared after it: the same change is
#: often declared again by the other detector (chosen on the tuning drifts of benchmarks/drift.py:
#: docs/drift-log.md, "A fresh threshold model at a declared change").
FRESH_BINS_PRIOR = CHANGE_ENTRY_PRIOR
FRESH_BINS_KEPT = RESTART_DELAYS[-1]

# ----------------------------------------------------------------- the loss detector (docs/drift.md)
#: How many times the block means' recent mean the loss detector's level may stand: a level that lags a
#: learner's falling losses hides the next change (a shrink of the target's spread; docs/drift-log.md).
LEVEL_CEILING = 3.0
#: The loss detector's CUSUM threshold in regression (classes keep the detector's default): a shrink of the
#: target's spread, whose rounds each err by many times the new concept's variance, is declared a few rounds
#: sooner, and the heavy-tailed tuning series declare as before; on classes the lower threshold played a
#: tuning drift worse (docs/drift-log.md, "A shrink declared sooner").
REGRESSION_LOSS_THRESHOLD = 9.5
#: How many times the loss detector's level one round's loss must stand for that round alone to declare a
#: change (regression), and how many deviations of the targets' mean its target may lie at most: a change
#: that moves the target far errs so on its first row, which the CUSUM, averaging it into a block, declared
#: a row later; a row in a heavy tail errs as much with no change, its target far out (chosen on the tuning
#: drifts and raw sets: docs/drift-log.md, "A change declared on its first row alone").
REGRESSION_LONE_LOSS = 56.0
LONE_TARGET_DEVIATIONS = 4.0

# ----------------------------------------------------------------- the labels' detector (docs/drift.md)
#: The labels' detector (two classes): the rise of either class's odds it tests for, and its CUSUM
#: threshold, higher than the error detector's: a stationary stretch's labels wander as far as a changed
#: concept's first rows (docs/drift-log.md, "Agrawal's first change, declared on the labels' rate with the
#: errors").
LABEL_SHIFT_RATIO = 3.0
LABEL_SHIFT_THRESHOLD = 8.0
#: How many binomial standard deviations the mixture's errors since a shift of the labels must stand above
#: their rate before it for the shift to be declared a change: the wandering labels of a stationary
#: stretch do not raise the errors (same section).
LABEL_SHIFT_DEVIATIONS = 2.0
#: The fewest rounds the labels' detector compares on either side of a shift: a run shorter than this is
#: not confirmed, since a few errors among a few rounds pass any bar of deviations (docs/drift-log.md,
#: session 16, "The rule kept").
LABEL_SHIFT_LEAST_ROUNDS = 30

# ----------------------------------------------------------------- the local expert (docs/drift.md)
#: Rows the local expert keeps, and the neighbours it votes with (docs/auto.md#neighbour_rows).
NEIGHBOUR_ROWS = 1000
NEIGHBOURS = 5
#: Rows it holds before it plays: a vote over a few rows is a poor estimate
#: (docs/auto.md#neighbours_wake_rows).
NEIGHBOURS_WAKE_ROWS = 200
#: Features above which there is none: its window grows with them and neighbourhoods say less
#: (docs/auto.md#neighbours_max_dim).
NEIGHBOURS_MAX_DIM = 200
#: Its prior once awake: small, it rarely leads on stationary data (docs/auto.md#neighbours_prior).
NEIGHBOURS_PRIOR = ENTRY_PRIOR
#: The weight below which it naps (for NAP_ROUNDS rounds): its prior, where the trees and the forest nap
#: below NAP_WEIGHT. Its ranking of the window costs much of a round, and one that has not gained on the
#: weight it entered at for that long gives nothing for it (a record's gaps had it fade from there so
#: slowly that it played for thousands of rounds, moving no error; the trees at this weight moved a
#: drift's error: docs/auto.md#nap_weight-and-nap_rounds).
NEIGHBOURS_NAP_WEIGHT = NEIGHBOURS_PRIOR

# ----------------------------------------------------------------- the trees (docs/drift.md)
#: Grace periods of the Hoeffding trees (classes): which of Agrawal's concepts one fits depends on it
#: (docs/auto.md#tree_graces).
TREE_GRACES = (50, 200, 400)
#: Rows the trees learn before they play, and their prior weight together once they do.
TREE_WAKE_ROWS = 200
TREE_PRIOR = ENTRY_PRIOR
#: Features above which there are no trees: their arrays are leaves x classes x features.
TREE_MAX_DIM = 200
#: Leaves of a tree at most: its state and cost stay flat.
MAX_TREE_LEAVES = 64
#: The kinds that nap (the trees, the local expert, the forest: Kind.naps) neither learn nor play, out
#: of the mixture, once their weight together has stayed below NAP_WEIGHT (the local expert's own,
#: NEIGHBOURS_NAP_WEIGHT) for NAP_ROUNDS rounds in play, and wake at the next change declared: they cost
#: much of a round and rarely hold weight (benchmarks/results/expert_cost.md,
#: docs/auto.md#nap_weight-and-nap_rounds).
NAP_WEIGHT = 1e-3
NAP_ROUNDS = 250

# ----------------------------------------------------------------- the light members (docs/auto.md)
#: A member of GRID whose weight has stayed below LIGHT_WEIGHT for LIGHT_ROUNDS rounds in a row (counted
#: afresh at each declared change) learns, once its learner no longer grows, only every LIGHT_EVERY-th row
#: of regression; it plays every round, so its weight and its records under every switching rate stay
#: exact. In a mature round most members hold almost no weight, and their learning is much of its cost
#: (docs/auto.md#light_weight-light_rounds-and-light_every).
LIGHT_WEIGHT = 1e-2
LIGHT_ROUNDS = 100
LIGHT_EVERY = 4
#: LIGHT_ROUNDS on three classes or more: a multinomial kernel member may hold almost no weight for its
#: first thousand rows and lead after them (RandomRBF's five classes); light after 100 or 300 rounds it
#: never caught up (docs/auto-log.md "Light members on many classes"). Two classes count no light rounds.
MANY_CLASSES_LIGHT_ROUNDS = 500

# ----------------------------------------------------------------- the Mondrian forest (docs/auto.md)
#: Trees of the aggregated Mondrian forest (three classes or more): AMF's default; fewer trees vote
#: noisier labels (docs/auto.md#the-mondrian-forest).
FOREST_TREES = 10
#: Nodes of a tree at most: then its splits stay and its nodes only count, so its state and cost stay
#: flat; about what AMF's unbounded trees grow to on image segments, where fewer cost errors
#: (docs/auto-log.md#trees-as-large-as-amfs).
FOREST_MAX_NODES = 1023
#: The forest's saved bytes on two classes at most (its trees' nodes bounded to fit: a node keeps its box,
#: two floats a feature): the node bound's on rows of up to about twenty features
#: (docs/auto-log.md#trees-as-large-as-amfs).
FOREST_MAX_BYTES = 4_000_000
#: Features above which there is none: on digits the kernels lead, and the forest cost much of the round
#: for little weight (docs/auto.md#the-mondrian-forest).
FOREST_MAX_DIM = 32
#: The Dirichlet (Krichevsky-Trofimov) prior of a node's class frequencies: AMF's earlier multi-class
#: default; its default now left the forest behind the kernels by log loss on the tuning streams, so that
#: it never held weight (docs/auto.md#the-mondrian-forest); with a node's first row free, a larger prior
#: raised the log loss on most tuning streams (docs/auto-log.md#a-nodes-first-row-pays-no-loss).
FOREST_DIRICHLET = 0.01
#: Rows the forest learns before it plays, and its prior weight once it does: on a small stream (iris) it
#: must play early and gain weight fast (docs/auto.md#the-mondrian-forest).
FOREST_WAKE_ROWS = 20
FOREST_PRIOR = 0.05

# ----------------------------------------------------------------- the target's last values (docs/series.md)
#: Last targets the autoregressive expert regresses on (regression; benchmarks/results/series.md).
LAGS = 8
#: Rounds before the experts on the last targets may wake (once the last target beats the mean): the
#: warm-up's, so that they may play from the grid's first round (docs/series.md).
LAGS_WAKE_ROWS = 32
#: Buffered rounds after which the warm-up plays the last target while its squared errors stay below
#: LAGS_WARMUP_SHARE times the running mean's: the first rounds of a short series fall in the warm-up, and
#: on a heavy tail a few rounds in no order can favour it by chance (chosen on the tuning series:
#: docs/series.md#the-warm-up).
LAGS_WARMUP_ROWS = 6
LAGS_WARMUP_SHARE = 0.5
#: Buffered rounds after which the warm-up also plays the last target while its squared errors are below
#: both the running mean's and those of the linear model it plays instead: a short cyclic or trending
#: series turns within its first dozen rows, and the linear model of so few rows follows the turn late;
#: with fewer rows the rule changed plays on a raw set in no order (docs/series.md#the-warm-up).
LAGS_WARMUP_LINEAR_ROWS = 6
#: The prior of each of the two experts on the last targets once awake: large, they wake only where the
#: rows come in time order (docs/series.md); the autoregression's share of it less LAGS_LONG_PRIOR.
LAGS_PRIOR = 0.25
#: Last targets of the second autoregression, which wakes with the two experts on the LAGS last at
#: LAGS_LONG_PRIOR, taken from the first autoregression's prior so that the lags' total stays: with 16 lags
#: a monthly series' year is in view, while the 8 lags' model stays first where a short order does better
#: (chosen on the tuning series: docs/series.md#a-second-autoregression-16-lags).
LAGS_LONG = 16
LAGS_LONG_PRIOR = 0.05
#: The prior variance of the autoregression's weights on the lags together (of w'x, x the lags): the lags
#: of a series move together, so that a unit variance held its correction near 0 through a series' first
#: bursts (chosen on the tuning series: docs/series.md#the-autoregressions-prior).
LAGS_WEIGHT_VARIANCE = 16.0
#: Deviations of the target's running mean beyond which the last target, awake, plays a round alone (a
#: view, as the first rounds': the weights are the mixture's own): a burst that far beyond the rows seen
#: is extrapolated by the experts of the row (the level) and the autoregressions (a rebound), and the last
#: target alone does not extrapolate; the lowest that moved no tuning series but water_flow's bursts for
#: the worse (chosen on the tuning series: docs/series.md#a-burst-plays-the-last-target).
LAGS_BURST = 4.5
# ----------------------------------------------------------------- the quantile-threshold view
#: Thresholds per feature at most: a target that steps at a few ages needs no more
#: (docs/auto.md#max_thresholds).
MAX_THRESHOLDS = 7
#: Thresholds over all features at most: the model on them keeps a (columns + 1)^2 matrix, about a
#: Nystrom base's size.
MAX_COLUMNS = 128

# ----------------------------------------------------------------- the multi-class warm-up
#: The noise variance of the warm-up's kernel regression of the classes (its kernel's prior variance is
#: 1): a small one fits the few buffered rows closely, a class seen once among them too; the evidence
#: weighs it against the linear model (chosen on the tuning streams: docs/auto.md#warmup_noise).
WARMUP_NOISE = 0.1

# ----------------------------------------------------------------- the mixture and its bounds
#: The switching rates mixed: 0 (the aggregating algorithm) and rates that move the weight within about
#: 100 and 10 rounds (docs/auto.md#rates).
RATES = (0.0, 1e-2, 1e-1)
#: The prior of the rates other than 0, together: a stationary stream pays ln(1/0.95)/eta for them
#: (docs/auto.md#switching_prior).
SWITCHING_PRIOR = 0.05
#: Until this round a regression grid plays the weights of its experts of the row raised to
#: MIX_EARLY_ROUNDS / round among themselves (the lag experts' at the mixture's own): its first rounds'
#: evidence is thin against the rate, and a view leaves the weights to the plain mixture after it (chosen on
#: the tuning streams: docs/series.md#the-mixtures-first-rounds).
MIX_EARLY_ROUNDS = 400
#: The interval [-B, B] of standardised targets on which the mixture is Vovk's aggregating algorithm: a
#: wider one slows it down (docs/auto.md#mix_bound).
MIX_BOUND = TARGET_BOUND
#: The bound on the regression bases' and the mixture's plays, in deviations of the target: a tight bound
#: cuts the bases' functions down on the tails, and a heavy tail's targets lie beyond 5 deviations
#: (docs/auto.md#regression_bound, docs/series.md).
REGRESSION_BOUND = 20.0
#: The bound of a regression state saved before the rules for heavy tails: it goes on with it.
EARLIER_REGRESSION_BOUND = 5.0
#: How far beyond the range of the targets seen a prediction may go, in widths of that range
#: (docs/series.md: a heavy tail's next record is beyond every target seen).
RANGE_MARGIN = 1.0
#: The bound on the classification scores, in log-odds (docs/auto.md#score_bound).
SCORE_BOUND = 10.0

# ----------------------------------------------------------------- the label of fewest errors
#: The vote's learning rate under the 0-1 loss: an error multiplies a voter's weight by exp(-rate)
#: (docs/auto.md#label_rate).
LABEL_RATE = 2.0
#: The vote's switching rates (its own Fixed-Share grid, the rate 0 first; docs/auto.md#label_rates) and
#: the prior of those other than 0, together.
LABEL_RATES = (0.0,)
LABEL_SWITCHING_PRIOR = 0.05
#: The prior weight of the log-loss mixture's own top label among the voters (docs/auto.md#label_own_prior).
LABEL_OWN_PRIOR = 0.1
#: The prior weight of an expert that enters the vote (a restarted copy, a sleeping expert that wakes): the
#: mixture's entry prior (docs/auto.md#label_entry_prior).
LABEL_ENTRY_PRIOR = ENTRY_PRIOR
#: The discount of the label rules' errors (the vote's label, the mixture's tempered class) by which
#: the label played is picked: recent rounds count, so a rule that falls behind is left
#: (docs/auto.md#label_pick_discount).
LABEL_PICK_DISCOUNT = 0.999
#: The lead in discounted errors the tempered class needs over the vote's to be played: less than one
#: error, so equal counts keep the vote (docs/auto.md#label_pick_margin).
LABEL_PICK_MARGIN = 0.5
#: The share of the vote's weight its class needs for the vote's label to be played where the tempered
#: class names another: below it the voters are split and the tempered class is played
#: (docs/auto.md#label_vote_share).
LABEL_VOTE_SHARE = 0.77
#: The power of the log-loss weights under which the pick's second rule mixes the experts' probabilities
#: for its class: flatter weights average the experts where one leads by log loss but none by errors
#: (docs/auto.md#label_weight_power).
LABEL_WEIGHT_POWER = 0.35

# ----------------------------------------------------------------- the label after a change (two classes)
#: The rounds after a declared change on two classes in which the label of fewest errors since it may be
#: played: the windows the recovery is measured on
#: (docs/drift-log.md#the-label-after-a-change-issue-39-session-17).
CHANGE_LABEL_ROUNDS = 1000
#: Its weights' learning rate under the 0-1 loss: an error multiplies an expert's weight by exp(-rate), so
#: a few errors move the label where the log loss would take hundreds of rounds (same section).
CHANGE_LABEL_RATE = 1.0
