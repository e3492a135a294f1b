"""`storlab schema`: the experiment file's JSON Schema, or the answer's."""

from __future__ import annotations

import click


@click.command("schema")
@click.option("--answer", is_flag=True, help="The JSON Schema of `storlab show --json` instead, made from the answer's types.")
def schema_command(answer: bool) -> None:
    """Print the experiment file's JSON Schema (for editors), made from the models that validate it."""
    import json

    if answer:
        from storlab.answer.model import Answer

        click.echo(json.dumps(Answer.model_json_schema(), indent=2))
        return
    from storlab.experiment.schema import experiment_schema

    click.echo(json.dumps(experiment_schema(), indent=2))
