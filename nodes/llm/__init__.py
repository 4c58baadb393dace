"""Chat-model roles: any LangChain chat model (or a local GGUF file) as diagnoser, proposer, critic.

Entry point: ``nodes.llm.factory.build_llm_role(role, spec, settings)``. Model SPECs are parsed in
``models.py``; prompts are assembled in ``context.py`` from the files in ``nodes/prompts/``;
``structured.py`` turns answers into pydantic objects; ``accounting.py`` counts tokens and time.
"""
