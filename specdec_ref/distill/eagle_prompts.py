"""What the target is asked in order to write the feature head's corpus itself (stage 1 of `distill.eagle`).

STYLES ask it for a user's request about a random word; TASKS turn a paragraph it wrote into a grounded task;
FOLLOWUPS make some answers two-turn; answer shard i is written at TEMPERATURES[i % 4].
"""

STYLES = [  # {w} is a random word; every one asks the target to write a prompt, not to answer it
    "Write one question a curious person might ask an AI assistant about {w}. Reply with the question only.",
    "Write one question a child might ask about {w}. Reply with the question only.",
    "Write a request for practical advice about {w}, as a user would type it to an assistant. "
    "Reply with the request only.",
    "Write a 'how do I' question about {w}. Reply with the question only.",
    "Write a question that asks to compare {w} with something similar. Reply with the question only.",
    "Write a request asking an assistant for a very short story involving {w}. Reply with the request only.",
    "Write a request asking an assistant for a short poem about {w}. Reply with the request only.",
    "Write a question asking why something about {w} is the way it is. Reply with the question only.",
    "Write a request for a list of tips related to {w}. Reply with the request only.",
    "Write a question about the history of {w}. Reply with the question only.",
    "Write a request asking an assistant to explain {w} in simple words. Reply with the request only.",
    "Write a request asking for a short email that mentions {w}. Reply with the request only.",
    "Write a question a student might ask a teacher about {w}. Reply with the question only.",
    "Write a request asking for the pros and cons of {w}. Reply with the request only.",
    "Write a request asking for a step-by-step plan involving {w}. Reply with the request only.",
    "Write a fun trivia question about {w}. Reply with the question only.",
    "Write a request asking for a short Python function that has something to do with {w}. "
    "Reply with the request only.",
    "Write a request asking for a numbered list of facts about {w}. Reply with the request only.",
    "Write a question that needs a step-by-step answer, about {w}. Reply with the question only.",
    "Write a request asking to explain a common mistake people make with {w}. Reply with the request only.",
    "Write a request asking for a table-like comparison (as plain text) involving {w}. "
    "Reply with the request only.",
    "Write a short math word problem about {w}, as a student would ask it. Reply with the problem only.",
]
TASKS = [  # input-grounded tasks: the answer copies, trims or restructures the paragraph
    "Rewrite this paragraph with small edits to make it clearer:\n\n{p}",
    "Summarise this paragraph in one sentence:\n\n{p}",
    "Extract the key facts from this paragraph as a bullet list:\n\n{p}",
    "Repeat this paragraph, but make it more formal:\n\n{p}",
    "Fix any grammar mistakes in this paragraph and return it:\n\n{p}",
    "Turn this paragraph into three short questions and answers:\n\n{p}",
]
FOLLOWUPS = ["Can you give me an example?", "Can you explain that more simply?", "Why is that?",
             "Can you make it shorter?", "What should I do first?", "Tell me more about the first point.",
             "Can you put that as a numbered list?", "Thanks! Can you summarise it in one sentence?",
             "What would you add to that?", "Can you write it again, more formally?"]
# answer shard i is written at TEMPERATURES[i % 4] (the seed-0 run used 3)
TEMPERATURES = (0.0, 0.7, 1.0, 0.3)
