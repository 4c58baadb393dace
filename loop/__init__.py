"""The loop's records and rules, below both the graph (which wires the nodes) and the nodes (which do
the work): the typed state, the attempt and review records, the role messages, the settings, scoring,
the budget, the streaks, the judgement of a round and every route. Apart from reading the settings'
defaults, nothing here touches a file, a device or a model: each rule is a function of its inputs.
"""
