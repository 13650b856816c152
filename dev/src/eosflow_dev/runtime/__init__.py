"""What eosflow needs from the machine at run time: Java, Maven, the jars it fetches."""
