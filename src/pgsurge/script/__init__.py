"""pgbench's script language, pure: no I/O, no psycopg.

``parse_script(source)`` turns script text into a tuple of commands (see
``ast.py``); the run engine compiles expressions into closures with
``evaluate.compile_expr`` inside each worker, so what crosses process
boundaries is plain, picklable data.
"""
