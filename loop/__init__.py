"""The loop's records and rules, below both the graph (which wires the nodes) and the nodes (which do
the work): the typed state, the attempt and review records, scoring, the budget, the streaks, the
judgement of a round and every route. Pure: nothing here touches a file, a GPU or a model.
"""
