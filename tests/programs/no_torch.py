print("no torch here")
