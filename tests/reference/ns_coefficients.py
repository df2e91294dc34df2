"""Newton-Schulz coefficient schedules as the papers give them, for the float64
references (tests/reference) and the comparison with pytorch-optimizer
(tests/python/test_normuon.py): copied from the sources named, not read from
the C code."""

# Jordan's quintic (github.com/KellerJordan/Muon).
QUINTIC = (3.4445, -4.7750, 2.0315)
# Polar Express, arXiv 2505.16932 Algorithm 1: iterations 0..7; the first seven
# divided by (1.01, 1.01^3, 1.01^5), the last repeated; normalization by
# 1.01 ||X||_F.
_PE_RAW = [
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
]
PE = [(a / 1.01, b / 1.01 ** 3, c / 1.01 ** 5) for (a, b, c) in _PE_RAW[:-1]] + [_PE_RAW[-1]]
