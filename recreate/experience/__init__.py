"""Experience: the trajectory schema (v1), the on-disk store with its SQLite catalog, the Chroma index,
inspection views and LangChain tools for the meta-agent, and importers for existing logs.

Import the pieces from their modules (`recreate.experience.store`, `.tools`, ...): this package stays
light so that `recreate.experience.schema` loads without Chroma or LangChain.
"""
