"""The schedule families, one module per family (``onef1b``, ``interleaved``, ``zero_bubble``,
``vshape``, ``offload``, ``recompute``, ``greedy``), and the published heuristics some of them run
(``zb_auto``, ``zbv_auto``, ``vpattern``, ``vblocks``). ``ppsolve.baselines`` lists them as methods."""
